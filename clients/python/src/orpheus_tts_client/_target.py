"""Target strings and channel options: spreading sessions over replicas.

Accepted targets:

    localhost:50051              -> as is (gRPC's default dns resolver: every A/AAAA record)
    dns:///tts.internal:50051    -> as is; all resolved addresses, re-resolved by gRPC
    10.0.0.1:50051,10.0.0.2:50051
                                 -> "ipv4:10.0.0.1:50051,10.0.0.2:50051" (static list)
    tts-a:50051,tts-b:50051      -> host names are resolved ONCE, here, to a static ipv4:/ipv6:
                                    list; use dns:/// (or a headless Service) for a changing set
    ipv4:..., ipv6:..., unix:..., xds:..., any other "scheme:" target -> as is

With several addresses the load-balancing policy decides where each call goes;
``round_robin`` (the default here) sends successive calls - i.e. sessions - to successive
replicas, whereas gRPC's own default, ``pick_first``, would pin every call to one of them.

Failover (both in the channel's service config, so gRPC does it for every call):

- client-side health checking (``healthCheckConfig``): each replica's connection watches
  ``grpc.health.v1.Health/Watch`` for ``orpheus.tts.v1.TTSService``, and ``round_robin``
  picks only replicas that report SERVING. A replica that is loading its model or draining
  for shutdown (NOT_SERVING) is skipped at once, and one that went away is skipped because
  its connection failed. gRPC C-core (grpcio) has this built in; a server without the
  health service (UNIMPLEMENTED) counts as healthy.
- a retry policy for UNAVAILABLE: a call that a replica refused before accepting it (the
  server sends no response headers then, so nothing was generated) is sent again, and
  ``round_robin`` picks the next replica. It covers the moment between a replica turning
  NOT_SERVING and the client hearing of it. A call the server accepted is never retried.
  StreamingSynthesize is left out of the policy: the clients retry it themselves with the
  same rule (``_retry`` says why), and resume one the server accepted and then failed
  (``_resume``).
"""

from __future__ import annotations

import ipaddress
import json
import re
import socket

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_HOST_PORT = re.compile(r"^(?:\[(?P<v6>[^\]]+)\]|(?P<host>[^:\[\]]+)):(?P<port>\d+)$")


def _split_host_port(addr: str) -> tuple[str, int]:
    m = _HOST_PORT.match(addr.strip())
    if not m:
        raise ValueError(f"bad address {addr!r}: expected host:port or [ipv6]:port")
    return (m.group("v6") or m.group("host")), int(m.group("port"))


def _is_scheme_target(target: str) -> bool:
    # "localhost:50051" (or "tts-a:50051,tts-b:50051") also looks like "scheme:", so a
    # host:port first item (port all digits) wins.
    if _HOST_PORT.match(target.split(",", 1)[0].strip()):
        return False
    return bool(_SCHEME.match(target))


def _resolve(host: str, port: int) -> tuple[list[str], list[str]]:
    """IPv4 and IPv6 addresses of host (literals are returned as they are)."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return ([str(ip)], []) if ip.version == 4 else ([], [str(ip)])
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise ValueError(f"cannot resolve {host!r} in target list: {e}") from None
    v4 = sorted({i[4][0] for i in infos if i[0] == socket.AF_INET})
    v6 = sorted({i[4][0] for i in infos if i[0] == socket.AF_INET6})
    return v4, v6


def resolve_target(target: str) -> str:
    """The gRPC target string for a user-facing target (see module docstring)."""
    target = target.strip()
    if not target:
        raise ValueError("empty target")
    if "," not in target or _is_scheme_target(target):
        return target
    addrs = [a for a in (s.strip() for s in target.split(",")) if a]
    v4: list[str] = []
    v6: list[str] = []
    all_v4 = all_v6 = True
    for addr in addrs:
        host, port = _split_host_port(addr)
        a4, a6 = _resolve(host, port)
        all_v4 &= bool(a4)
        all_v6 &= bool(a6)
        # One address per listed replica: a name with several records is one replica here.
        if a4:
            v4.append(f"{a4[0]}:{port}")
        if a6:
            v6.append(f"[{a6[0]}]:{port}")
    # gRPC's static resolvers take one family per target; prefer IPv4 when all have it.
    if all_v4:
        return "ipv4:" + ",".join(v4)
    if all_v6:
        return "ipv6:" + ",".join(v6)
    raise ValueError(f"target list {target!r} mixes IPv4-only and IPv6-only hosts; "
                     "use one address family")


TTS_SERVICE = "orpheus.tts.v1.TTSService"


def names_replicas(target: str) -> bool:
    """Whether a target names a set of replicas: a comma list, or a ``dns:`` name (e.g. a
    Kubernetes headless Service). The clients' default health checking is on for these."""
    target = target.strip()
    return "," in target or target.lower().startswith("dns:")
#: gRPC caps a call at 5 attempts
MAX_RETRIES = 4


def service_config(lb_policy: str | None, *, health_check: bool = False,
                   retries: int = 0) -> dict | None:
    """The gRPC service config (JSON object) for these settings, or None for gRPC's defaults.

    ``health_check`` takes effect with a load-balancing policy that supports it
    (``round_robin``); ``retries`` is the number of extra attempts for a call refused with
    UNAVAILABLE before the server accepted it. gRPC retries every method but
    StreamingSynthesize, which the clients retry themselves (``_retry``).
    """
    if not 0 <= retries <= MAX_RETRIES:
        raise ValueError(f"retries must be 0..{MAX_RETRIES} (gRPC allows 5 attempts), "
                         f"got {retries}")
    config: dict = {}
    if lb_policy:
        config["loadBalancingConfig"] = [{lb_policy: {}}]
        if health_check:
            config["healthCheckConfig"] = {"serviceName": TTS_SERVICE}
    if retries:
        config["methodConfig"] = [{
            # the clients retry this one themselves (see _retry); the most specific name wins
            "name": [{"service": TTS_SERVICE, "method": "StreamingSynthesize"}],
        }, {
            "name": [{"service": TTS_SERVICE}],
            "retryPolicy": {
                "maxAttempts": retries + 1,
                "initialBackoff": "0.05s",
                "maxBackoff": "1s",
                "backoffMultiplier": 2,
                "retryableStatusCodes": ["UNAVAILABLE"],
            },
        }]
    return config or None


def channel_options(lb_policy: str | None, extra: list[tuple[str, object]] | None = None, *,
                    health_check: bool = False, retries: int = 0) -> list[tuple[str, object]]:
    """Channel options with the policy, health checking and retries in the service config."""
    options: list[tuple[str, object]] = []
    config = service_config(lb_policy, health_check=health_check, retries=retries)
    if config:
        options.append(("grpc.service_config", json.dumps(config)))
    options.extend(extra or [])
    return options


def tls_credentials(ca_file: str | None = None, cert_file: str | None = None,
                    key_file: str | None = None):
    """grpc channel credentials for a TLS server: ``ca_file`` the CA to trust (None: the
    system's roots), ``cert_file``/``key_file`` this client's certificate for mTLS."""
    import grpc

    def read(path):
        if path is None:
            return None
        with open(path, "rb") as f:
            return f.read()
    if bool(cert_file) != bool(key_file):
        raise ValueError("a client certificate needs both cert_file and key_file")
    return grpc.ssl_channel_credentials(root_certificates=read(ca_file),
                                        private_key=read(key_file),
                                        certificate_chain=read(cert_file))
