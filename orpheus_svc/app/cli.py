"""`orpheus-svc` command line: `serve` (the gRPC server), `synth` (offline, to a WAV file)
and `config` (print the effective configuration)."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from orpheus_svc import __version__
from orpheus_svc.config import ConfigError, dump, load_config
from orpheus_svc.core.backends import BACKENDS


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="YAML config file")
    p.add_argument("--profile", choices=["conversational", "longform"], help="tuning profile")
    p.add_argument("--model", help="model checkpoint: local dir (HF layout) or hub id; "
                                   "default: the embedded demo model")
    p.add_argument("--snac", help="SNAC checkpoint: local dir or hub id (hubertsiuzdak/snac_24khz)")
    p.add_argument("--backend", choices=list(BACKENDS), help="engine backend")
    p.add_argument("--device", help="auto, cpu, cuda or cuda:N")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="any config setting, e.g. --set engine.max_batch_size=16 (repeatable)")


def _overrides(args: argparse.Namespace) -> dict:
    out = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set {item!r}: expected SECTION.KEY=VALUE")
        out[key.strip()] = value
    shortcuts = {"profile": "profile", "model": "model.path", "snac": "model.snac",
                 "backend": "engine.backend", "device": "model.device",
                 "host": "server.host", "port": "server.port",
                 "sim_profile": "engine.sim_profile", **SECURITY_FLAGS}
    for attr, dotted in shortcuts.items():
        value = getattr(args, attr, None)
        if value is not None:
            out[dotted] = value
    return out


# The security shortcuts: flag dest -> setting (docs/security.md).
SECURITY_FLAGS = {"tls_cert": "server.tls_cert_file", "tls_key": "server.tls_key_file",
                  "tls_client_ca": "server.tls_client_ca_file",
                  "api_keys_file": "server.api_keys_file"}

SERVE_EPILOG = """\
security: everything is off by default, so the server speaks plaintext gRPC and admits
every caller. For anything reachable from another host, turn on TLS (--tls-cert and
--tls-key, i.e. server.tls_cert_file and server.tls_key_file; no plaintext port is then
opened), mTLS (--tls-client-ca, server.tls_client_ca_file) and API keys with per-key limits
(--api-keys-file, server.api_keys_file; or server.api_keys inline). Related:
server.auth_open_reflection, server.auth_open_status, server.metrics_host,
server.reflection. docs/security.md explains each; every setting can also be given as
--set section.key=value or ORPHEUS_SECTION__KEY (docs/configuration.md)."""


def _serving(p: argparse.ArgumentParser) -> None:
    """Where and how the server listens: address and the security shortcuts."""
    p.add_argument("--host", help="bind address (default 0.0.0.0)")
    p.add_argument("--port", type=int, help="port (default 50051; 0 picks a free one)")
    p.add_argument("--sim-profile", dest="sim_profile", help="GPU timing profile for --backend sim")
    tls = p.add_argument_group("security (docs/security.md; off by default)")
    tls.add_argument("--tls-cert", dest="tls_cert", metavar="PEM",
                     help="TLS certificate chain (server.tls_cert_file); with --tls-key")
    tls.add_argument("--tls-key", dest="tls_key", metavar="PEM",
                     help="TLS private key (server.tls_key_file)")
    tls.add_argument("--tls-client-ca", dest="tls_client_ca", metavar="PEM",
                     help="mTLS: accept only clients with a certificate from this CA "
                          "(server.tls_client_ca_file)")
    tls.add_argument("--api-keys-file", dest="api_keys_file", metavar="FILE",
                     help="API keys with per-key limits, re-read when it changes "
                          "(server.api_keys_file)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="orpheus-svc", description=__doc__)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the gRPC server", epilog=SERVE_EPILOG,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(serve)
    _serving(serve)
    show = sub.add_parser("config", help="print the effective configuration (defaults, "
                                         "profile, file, ORPHEUS_* environment and flags "
                                         "applied) as a config file")
    _common(show)
    _serving(show)
    synth = sub.add_parser("synth", help="synthesize text to a WAV file without a server")
    _common(synth)
    synth.add_argument("--text", required=True, help="text to speak")
    synth.add_argument("--voice", default="", help="voice (default: the model's default voice)")
    synth.add_argument("--out", required=True, type=Path, help="output WAV (24 kHz mono 16-bit)")
    synth.add_argument("--seed", type=int, help="sampling seed (reproducible audio)")
    return parser


def main(argv: list[str] | None = None, *, priority=None) -> int:
    """`priority`: a batch order other than the deadline one, for the scheduling benchmark
    only (bench/orpheus_bench/policies.py); the command line offers none."""
    args = build_parser().parse_args(argv)
    try:
        config = load_config(args.config, overrides=_overrides(args))
    except ConfigError as exc:
        print(f"orpheus-svc: configuration error: {exc}", file=sys.stderr)
        return 2
    if args.command == "config":
        sys.stdout.write(dump(config))
        return 0
    if args.command == "serve":
        try:
            if config.server.topology == "split":  # an engine process and gRPC front-ends
                from orpheus_svc.app.topology import serve_split as serve
            else:
                from orpheus_svc.app.server import serve_main as serve
        except ImportError as exc:  # installed without the server extra (e.g. a build machine)
            print(f"orpheus-svc: serving needs the server extra (pip install "
                  f"'orpheus-svc[server]' and ./clients/python): {exc}", file=sys.stderr)
            return 2
        return serve(config, priority=priority)
    return _synth(config, args)


def _synth(config, args) -> int:
    from orpheus_svc.runtime import build_runtime
    from orpheus_svc.synth import SynthesisError, synthesize, write_wav

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    try:
        runtime = build_runtime(config)
    except (ConfigError, FileNotFoundError, ValueError) as exc:
        print(f"orpheus-svc: cannot load the model: {exc}", file=sys.stderr)
        return 2
    runtime.start()
    try:
        t0 = time.monotonic()
        result = synthesize(runtime, args.text, voice=args.voice, seed=args.seed,
                            progress=True)
        wall = time.monotonic() - t0
    except SynthesisError as exc:
        print(f"orpheus-svc: {exc}", file=sys.stderr)
        return 1
    finally:
        runtime.stop()
    write_wav(args.out, result.pcm)
    demo = " (demo model: not speech)" if runtime.is_demo else ""
    print(f"wrote {args.out}: {result.seconds:.2f} s of audio, {len(result.segments)} segment(s), "
          f"{result.num_tokens} tokens in {wall:.2f} s{demo}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
