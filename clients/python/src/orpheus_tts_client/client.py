"""Synchronous client, on grpc's sync channel.

    with Client("localhost:50051") as tts:
        for ev in tts.stream(["Hello the", "re. How are", " you?", FLUSH], voice="tara"):
            if isinstance(ev, AudioChunk):
                play(ev.audio)
"""

from __future__ import annotations

import threading
from typing import Any, Iterable, Iterator

import grpc
from orpheus_tts_client.proto.v1 import tts_pb2 as pb
from orpheus_tts_client.proto.v1 import tts_pb2_grpc

from . import _convert
from ._base import _UNSET, DEFAULT_TARGET, DEFAULT_VOICE, Metadata, _ClientBase
from ._session import Session
from .types import Encoding, Event, Sampling, ServerStatus, SynthesisResult, TTSError, VoiceList


class Client(_ClientBase):
    """Blocking client for ``orpheus.tts.v1.TTSService``.

    Args:
        target: ``host:port``, ``dns:///host:port``, a comma list ``h1:p1,h2:p2`` or any gRPC
            target (see ``orpheus_tts_client._target``).
        timeout: default deadline in seconds for every call (None: none). Per-call
            ``timeout=`` overrides it; a deadline covers a whole streaming session.
        lb_policy: gRPC load-balancing policy; ``round_robin`` spreads calls over all the
            target's addresses, ``pick_first`` (or None: gRPC's default) uses one.
        health_check: with ``round_robin``, send calls only to replicas whose
            grpc.health.v1 status for ``orpheus.tts.v1.TTSService`` is SERVING, so a replica
            that is loading or draining is skipped (False: every connected replica).
            ``health()`` and ``status()`` still reach replicas that are not serving.
            Default (None): on for targets that name replicas (a comma list or
            ``dns:///...``), off for a single ``host:port``.
        retries: extra attempts (0..4) for a call refused with UNAVAILABLE before the
            server accepted it (e.g. by a replica that just began draining); with
            ``round_robin`` the retry goes to the next replica. 0 turns retries off.
        resume: a streaming session that fails with UNAVAILABLE (or a broken connection)
            after the server accepted it is opened again, on another replica, and its text
            sent again from the first segment that had not ended; the events go on as one
            session (the cut segment is spoken again from its start) and the Summary counts
            ``resumes``. True, False, or ``Resume(max_attempts, max_seconds)`` for other
            bounds (see ``orpheus_tts_client._resume``). Default (None): on for targets that
            name replicas (as ``health_check``), off for a single ``host:port``.
        credentials: ``grpc.ssl_channel_credentials(...)`` for TLS; None is plaintext.
        metadata: sent with every call (e.g. ``[("authorization", "Bearer ...")]``).
        wait_for_ready: queue calls while the server is unreachable instead of failing fast.
        options: extra gRPC channel options.

    Errors: every call raises ``TTSError(code, details)`` for a non-OK status.
    """

    def __init__(self, target: str = DEFAULT_TARGET, **kwargs: Any) -> None:
        super().__init__(target, **kwargs)
        self._channel = self._new_channel(self._options)
        self._stub = tts_pb2_grpc.TTSServiceStub(self._channel)
        self._check = self._health_method(self._channel)
        self._info_lock = threading.Lock()
        self._info: tuple[grpc.Channel, Any, Any] | None = None

    def _new_channel(self, options) -> grpc.Channel:
        if self._credentials is not None:
            return grpc.secure_channel(self.grpc_target, self._credentials, options=options)
        return grpc.insecure_channel(self.grpc_target, options=options)

    def _info_stubs(self):
        """(stub, health check) for health() and status(); see _ClientBase."""
        if self._info_options is None:
            return self._stub, self._check
        with self._info_lock:
            if self._info is None:
                ch = self._new_channel(self._info_options)
                self._info = (ch, tts_pb2_grpc.TTSServiceStub(ch), self._health_method(ch))
            return self._info[1], self._info[2]

    @property
    def channel(self) -> grpc.Channel:
        return self._channel

    def close(self) -> None:
        self._channel.close()
        with self._info_lock:
            if self._info is not None:
                self._info[0].close()
                self._info = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def wait_ready(self, timeout: float | None = None) -> None:
        """Block until the channel is connected (grpc.FutureTimeoutError on timeout); with
        health checking, until a replica reports SERVING."""
        grpc.channel_ready_future(self._channel).result(timeout=timeout)

    # -- synthesis ---------------------------------------------------------------------------

    def session(self, voice: str = DEFAULT_VOICE, *,
                encoding: Encoding | str = Encoding.PCM16, sample_rate: int | None = None,
                sampling: Sampling | None = None, timeout: float | None = _UNSET,
                metadata: Metadata | None = None, word_timestamps: bool = False) -> Session:
        """Open a StreamingSynthesize session driven by hand: ``send(text)``, ``flush()``,
        ``end()``, ``cancel()``, and ``for ev in session`` (see Session).

        ``with client.session(voice="tara") as s: ...`` cancels it on exit if unfinished.
        ``word_timestamps=True`` adds WordTimings events (each word's place in the text sent
        and in the audio; docs/api.md).
        """
        return self._session(voice, encoding, sample_rate, sampling, timeout, metadata, None,
                             word_timestamps)

    def stream(self, text: Iterable[str | Any] | str, voice: str = DEFAULT_VOICE, *,
               encoding: Encoding | str = Encoding.PCM16, sample_rate: int | None = None,
               sampling: Sampling | None = None, timeout: float | None = _UNSET,
               metadata: Metadata | None = None,
               word_timestamps: bool = False) -> Iterator[Event]:
        """One StreamingSynthesize session; yields AudioChunk/SegmentStart/SegmentEnd, then Summary.

        ``text`` is a str or an iterable of str fragments (any size, mid-word is fine) and
        ``FLUSH`` items; it is consumed on a gRPC thread as the session runs, so it may block
        (e.g. read a pipe). Its end half-closes the input. Breaking out of the loop cancels.
        A convenience over ``session()``.
        """
        source = [text] if isinstance(text, str) else text

        def run() -> Iterator[Event]:
            session = self._session(voice, encoding, sample_rate, sampling, timeout, metadata,
                                    source, word_timestamps)
            yield from session.events()

        return run()

    def _session(self, voice, encoding, sample_rate, sampling, timeout, metadata,
                 source, word_timestamps=False) -> Session:
        config = _convert.config_request(voice, encoding, sample_rate, sampling, word_timestamps)
        enc = _convert.as_encoding(encoding)
        return Session(self._stub, config, self._call_kwargs(timeout, metadata), enc,
                       int(sample_rate or _convert.default_rate(enc)), source,
                       retries=self.retries, resume=self.resume)

    def synthesize_events(self, text: str, voice: str = DEFAULT_VOICE, *,
                          encoding: Encoding | str = Encoding.PCM16,
                          sample_rate: int | None = None, sampling: Sampling | None = None,
                          timeout: float | None = _UNSET, metadata: Metadata | None = None,
                          word_timestamps: bool = False) -> Iterator[Event]:
        """One Synthesize call (whole text in one request); yields events like ``stream``."""
        request = _convert.synthesize_request(text, voice, encoding, sample_rate, sampling,
                                              word_timestamps)
        kwargs = self._call_kwargs(timeout, metadata)

        def run() -> Iterator[Event]:
            yield from _events(self._stub.Synthesize(request, **kwargs))

        return run()

    def synthesize(self, text: str, voice: str = DEFAULT_VOICE, *,
                   encoding: Encoding | str = Encoding.PCM16, sample_rate: int | None = None,
                   sampling: Sampling | None = None, timeout: float | None = _UNSET,
                   metadata: Metadata | None = None,
                   word_timestamps: bool = False) -> SynthesisResult:
        """Speak a whole text (Synthesize RPC) and return all its audio at once."""
        return collect(self.synthesize_events(text, voice, encoding=encoding,
                                              sample_rate=sample_rate, sampling=sampling,
                                              timeout=timeout, metadata=metadata,
                                              word_timestamps=word_timestamps),
                       encoding=encoding, sample_rate=sample_rate)

    def synthesize_stream(self, text: Iterable[str | Any] | str, voice: str = DEFAULT_VOICE,
                          **kwargs: Any) -> SynthesisResult:
        """``stream`` collected into one SynthesisResult (same keyword arguments)."""
        return collect(self.stream(text, voice, **kwargs),
                       encoding=kwargs.get("encoding", Encoding.PCM16),
                       sample_rate=kwargs.get("sample_rate"))

    # -- service info ------------------------------------------------------------------------

    def list_voices(self, *, timeout: float | None = _UNSET,
                    metadata: Metadata | None = None) -> VoiceList:
        """The voices (and emotion tags) the server's model knows."""
        return _convert.voice_list(_unary(self._stub.ListVoices, pb.ListVoicesRequest(),
                                          self._call_kwargs(timeout, metadata)))

    def status(self, *, timeout: float | None = _UNSET,
               metadata: Metadata | None = None) -> ServerStatus:
        """Scheduler and KV slot figures (GetStatus)."""
        stub, _ = self._info_stubs()
        return _convert.server_status(_unary(stub.GetStatus, pb.GetStatusRequest(),
                                             self._call_kwargs(timeout, metadata)))

    def health(self, service: str = "", *, timeout: float | None = _UNSET,
               metadata: Metadata | None = None) -> str:
        """grpc.health.v1 Check: "SERVING", "NOT_SERVING", "UNKNOWN" or "SERVICE_UNKNOWN".

        ``service`` "" is the whole server; "orpheus.tts.v1.TTSService" the TTS service.
        """
        _, check = self._info_stubs()
        return _unary(check, service, self._call_kwargs(timeout, metadata))


def collect(events: Iterable[Event], *, encoding: Encoding | str = Encoding.PCM16,
            sample_rate: int | None = None) -> SynthesisResult:
    """Gather a stream of events into a SynthesisResult (client TTFB measured from here)."""
    builder = _convert.ResultBuilder(encoding, sample_rate)
    for ev in events:
        builder.add(ev)
    return builder.result()


def _unary(method, request, kwargs):
    try:
        return method(request, **kwargs)
    except grpc.RpcError as e:
        raise TTSError.from_rpc_error(e) from None


def _events(call) -> Iterator[Event]:
    try:
        for msg in call:
            ev = _convert.event(msg)
            if ev is not None:
                yield ev
    except grpc.RpcError as e:
        raise TTSError.from_rpc_error(e) from None
    finally:
        call.cancel()  # no-op once finished; frees the server's slot if the caller stopped early
