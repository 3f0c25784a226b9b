"""What the sync and asyncio clients share: construction arguments and per-call options."""

from __future__ import annotations

from typing import Any, Sequence

import grpc

from . import _health
from ._resume import Resume, resume_policy
from ._target import channel_options, names_replicas, resolve_target
from ._trace import trace_metadata

DEFAULT_TARGET = "localhost:50051"
DEFAULT_VOICE = ""  # empty: the server's model picks its own default voice (see list_voices())

#: "use the client's default" for per-call arguments
_UNSET: Any = object()

Metadata = Sequence[tuple[str, str]]


class _ClientBase:
    def __init__(self, target: str = DEFAULT_TARGET, *, timeout: float | None = None,
                 lb_policy: str | None = "round_robin",
                 credentials: grpc.ChannelCredentials | None = None,
                 metadata: Metadata | None = None, wait_for_ready: bool | None = None,
                 options: Sequence[tuple[str, Any]] | None = None,
                 health_check: bool | None = None, retries: int = 2,
                 resume: bool | Resume | None = None,
                 api_key: str | None = None, server_name: str | None = None) -> None:
        # api_key: sent as 'authorization: Bearer <key>' on every call (docs/security.md);
        # server_name: the name to check the server's TLS certificate against
        if api_key:
            metadata = (("authorization", f"Bearer {api_key}"),) + tuple(metadata or ())
        if server_name:
            options = [("grpc.ssl_target_name_override", server_name), *(options or ())]
        self.target = target
        self.grpc_target = resolve_target(target)
        self.timeout = timeout
        self.lb_policy = lb_policy
        # default: on where there is a choice of replicas (a list, dns:///); with one
        # host:port there is none, and the server's own refusal message is more useful
        self.health_check = names_replicas(target) if health_check is None else health_check
        health_check = self.health_check
        self.retries = retries
        # default: on where another replica can take over (the same targets as health_check)
        self.resume = resume_policy(resume, names_replicas(target))
        self.metadata = tuple(metadata or ())
        self.wait_for_ready = wait_for_ready
        self._credentials = credentials
        self._options = channel_options(lb_policy, list(options or ()),
                                        health_check=health_check, retries=retries)
        # health() and status() must reach a replica that is NOT_SERVING too (a loading or
        # draining server answers them), which a health-checked channel never picks: they
        # use a second channel without health checking, opened on first use.
        self._info_options = (channel_options(lb_policy, list(options or ()), retries=retries)
                              if health_check and lb_policy else None)

    def _call_kwargs(self, timeout: Any, metadata: Metadata | None) -> dict[str, Any]:
        """A call's options, made when the call starts: its metadata carries the caller's
        current trace context (_trace.py; only where opentelemetry-api is installed)."""
        given = self.metadata + tuple(metadata or ())
        return {
            "timeout": self.timeout if timeout is _UNSET else timeout,
            "metadata": given + trace_metadata(given) or None,
            "wait_for_ready": self.wait_for_ready,
        }

    @staticmethod
    def _health_method(channel):
        return channel.unary_unary(_health.CHECK_METHOD,
                                   request_serializer=_health.serialize_request,
                                   response_deserializer=_health.status_name)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(target={self.target!r}, lb_policy={self.lb_policy!r}, "
                f"health_check={self.health_check!r}, retries={self.retries!r}, "
                f"resume={self.resume!r})")
