"""orpheus-say: speak text into a WAV file through an orpheus-svc server.

    orpheus-say "Hello there." -o hello.wav --voice tara --server localhost:50051
    my-llm | orpheus-say --stream -o reply.wav        # each stdin line is sent as it arrives

Without --stream the whole text (the argument, or all of stdin when it is absent or "-") goes
in one Synthesize call. With --stream a StreamingSynthesize session sends the argument (if
any) and then every stdin line the moment it is read; the server ends a segment at each line
break, so audio for a line starts while later lines are still being written. The WAV (16-bit
mono PCM) is written as audio arrives; a short summary goes to stderr. On an error the
server's message is printed, the partial file removed, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import wave
from typing import Iterator, Sequence

from . import __version__
from ._base import DEFAULT_TARGET, DEFAULT_VOICE
from ._target import tls_credentials
from .client import Client
from .types import AudioChunk, Encoding, Sampling, SegmentEnd, Summary, TTSError

PCM16_RATES = (24000, 48000, 16000, 8000)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="orpheus-say", description=__doc__.split("\n\n")[0])
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    p.add_argument("text", nargs="?", help='text to speak ("-" or absent: read stdin)')
    p.add_argument("-o", "--output", default="out.wav", help="WAV file to write (default out.wav)")
    p.add_argument("--voice", default=DEFAULT_VOICE,
                   help="voice, any case (default: the served model's default voice)")
    p.add_argument("--server", default=os.environ.get("ORPHEUS_SERVER_ADDR", DEFAULT_TARGET),
                   help="host:port, dns:///host:port or h1:p1,h2:p2 "
                        "(default $ORPHEUS_SERVER_ADDR or %(default)s)")
    p.add_argument("--stream", action="store_true",
                   help="stream stdin line by line through StreamingSynthesize")
    p.add_argument("--rate", type=int, default=24000, choices=PCM16_RATES,
                   help="output sample rate in Hz (default 24000)")
    p.add_argument("--timeout", type=float, default=None, help="deadline in seconds")
    p.add_argument("--seed", type=int, default=None, help="sampling seed: the same seed, text, voice and settings give the same "
                        "PCM from the same server, backend and device")
    p.add_argument("--temperature", type=float, default=None)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--repetition-penalty", type=float, default=None)
    p.add_argument("--lb-policy", default="round_robin", help="gRPC lb policy (default round_robin)")
    p.add_argument("--api-key", default=os.environ.get("ORPHEUS_API_KEY"),
                   help="API key, sent as 'authorization: Bearer' (default $ORPHEUS_API_KEY)")
    p.add_argument("--tls", action="store_true",
                   help="connect with TLS (implied by --ca-file/--cert-file)")
    p.add_argument("--ca-file", help="CA certificate (PEM) to trust instead of the system roots")
    p.add_argument("--cert-file", help="client certificate (PEM) for mTLS")
    p.add_argument("--key-file", help="client private key (PEM) for mTLS")
    p.add_argument("--server-name", help="name to check the server certificate against")
    p.add_argument("-q", "--quiet", action="store_true", help="no summary on stderr")
    return p


def _stdin_lines(stdin) -> Iterator[str]:
    # readline() returns as soon as one line is in, unlike read() (and any readahead).
    while True:
        line = stdin.readline()
        if not line:
            return
        yield line


def _stream_text(first: str | None, stdin) -> Iterator[str]:
    if first and first != "-":
        yield first if first.endswith("\n") else first + "\n"
    yield from _stdin_lines(stdin)


def main(argv: Sequence[str] | None = None, *, stdin=None, stderr=None) -> int:
    args = _parser().parse_args(argv)
    stdin = stdin if stdin is not None else sys.stdin
    stderr = stderr if stderr is not None else sys.stderr
    sampling = Sampling(temperature=args.temperature, top_p=args.top_p,
                        repetition_penalty=args.repetition_penalty, seed=args.seed)
    if sampling == Sampling():
        sampling = None
    try:
        creds = tls_credentials(args.ca_file, args.cert_file, args.key_file) \
            if args.tls or args.ca_file or args.cert_file else None
        client = Client(args.server, timeout=args.timeout, lb_policy=args.lb_policy or None,
                        credentials=creds, api_key=args.api_key, server_name=args.server_name)
    except ValueError as e:
        print(f"orpheus-say: error: {e}", file=stderr)
        return 2
    fmt = dict(encoding=Encoding.PCM16, sample_rate=args.rate, sampling=sampling)
    if args.stream:
        events = client.stream(_stream_text(args.text, stdin), args.voice, **fmt)
    else:
        text = args.text if args.text not in (None, "-") else stdin.read()
        if not text.strip():
            print("orpheus-say: error: no text (give it as an argument or on stdin)", file=stderr)
            return 2
        events = client.synthesize_events(text, args.voice, **fmt)

    started = time.monotonic()
    first_audio = None
    segments = chunks = samples = 0
    summary = None
    try:
        with client, wave.open(args.output, "wb") as wav:
            wav.setnchannels(1)
            wav.setsampwidth(2)
            wav.setframerate(args.rate)
            for ev in events:
                if isinstance(ev, AudioChunk):
                    if first_audio is None:
                        first_audio = time.monotonic() - started
                    wav.writeframes(ev.audio)
                    chunks += 1
                    samples += ev.num_samples
                elif isinstance(ev, SegmentEnd):
                    segments += 1
                elif isinstance(ev, Summary):
                    summary = ev
    except (TTSError, OSError) as e:
        _remove(args.output)
        print(f"orpheus-say: error: {e}", file=stderr)
        return 1
    except KeyboardInterrupt:
        _remove(args.output)
        print("orpheus-say: interrupted", file=stderr)
        return 130
    if not args.quiet:
        wall = time.monotonic() - started
        ttfb = f"{first_audio * 1000:.0f} ms" if first_audio is not None else "n/a"
        server = f" (server {summary.time_to_first_audio_ms:.0f} ms)" if summary else ""
        print(f"orpheus-say: TTFB {ttfb}{server}, audio {samples / args.rate:.2f} s, "
              f"{segments} segment{'s' * (segments != 1)}, {chunks} chunks, "
              f"wall {wall:.2f} s -> {args.output}", file=stderr)
    return 0


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
