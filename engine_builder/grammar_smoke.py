"""Prove the audio grammar holds on a running server: python -m engine_builder.grammar_smoke.

    python -m engine_builder.grammar_smoke --target localhost:50071 [--requests 4]
        [--min-tokens 300] [--voice NAME] [--timeout 600]

Runs `--requests` Synthesize calls at once, each with a text long enough for several
hundred tokens, and reads GetStatus before and after. It passes (exit 0) only when

  * every call ends with its summary and generated at least --min-tokens tokens, and
  * GetStatus.grammar_violations did not grow (every token the engine produced was legal
    at its frame position: with the trtllm backend this shows the grammar logits
    processor saw the true last token of every request).

Exit 1 with the reasons otherwise, 2 when the server does not answer. scripts/gpu-smoke.sh
runs it against each TensorRT-LLM artifact; it works against any backend.
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ThreadPoolExecutor

# Long enough for well over 300 tokens of speech (~15 chars/s, 82 tokens/s).
TEXT = ("The lighthouse keeper climbed the spiral stairs every evening, counting each of the "
        "one hundred and twelve steps out loud. At the top he wiped the great lens, trimmed "
        "the wick, and watched the first ships turn toward the harbour. Nobody had asked him "
        "to count the steps; he simply liked knowing that the tower was still the same "
        "height it had been the night before, and the night before that.")


def _status(stub, pb2, timeout: float) -> dict:
    msg = stub.GetStatus(pb2.GetStatusRequest(), timeout=timeout)
    return {"grammar_violations": msg.grammar_violations, "tokens_total": msg.tokens_total,
            "backend": msg.backend}


def _synthesize(stub, pb2, voice: str, timeout: float) -> tuple[int, str | None]:
    """(tokens generated, error or None) for one Synthesize call."""
    import grpc

    try:
        summary = None
        for resp in stub.Synthesize(pb2.SynthesizeRequest(text=TEXT, voice=voice),
                                    timeout=timeout):
            if resp.HasField("summary"):
                summary = resp.summary
    except grpc.RpcError as exc:
        return 0, f"{exc.code().name}: {exc.details()}"
    if summary is None:
        return 0, "the call ended without its summary"
    return int(summary.num_tokens), None


def run(target: str, requests: int, min_tokens: int, voice: str, timeout: float) -> list[str]:
    """The reasons the check failed (empty when it passed); prints what it saw."""
    import grpc
    from orpheus_tts_client.proto.v1 import tts_pb2, tts_pb2_grpc

    with grpc.insecure_channel(target) as channel:
        stub = tts_pb2_grpc.TTSServiceStub(channel)
        before = _status(stub, tts_pb2, 10.0)
        with ThreadPoolExecutor(max_workers=requests) as pool:
            results = list(pool.map(lambda _: _synthesize(stub, tts_pb2, voice, timeout),
                                    range(requests)))
        after = _status(stub, tts_pb2, 10.0)
    problems = []
    for i, (tokens, error) in enumerate(results):
        if error is not None:
            problems.append(f"call {i}: {error}")
        elif tokens < min_tokens:
            problems.append(f"call {i}: {tokens} tokens < --min-tokens {min_tokens}")
    violations = after["grammar_violations"] - before["grammar_violations"]
    if violations:
        problems.append(f"GetStatus.grammar_violations grew by {violations} "
                        f"({before['grammar_violations']} -> {after['grammar_violations']})")
    print(f"grammar smoke on {after['backend']}: {requests} calls, tokens "
          f"{[t for t, _ in results]}, grammar_violations {before['grammar_violations']} -> "
          f"{after['grammar_violations']}: {'FAILED' if problems else 'ok'}")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m engine_builder.grammar_smoke",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", required=True, help="host:port of a serving orpheus-svc")
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--min-tokens", type=int, default=300)
    ap.add_argument("--voice", default="", help="voice (default: the served model's default)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per call")
    args = ap.parse_args(argv)
    try:
        problems = run(args.target, args.requests, args.min_tokens, args.voice, args.timeout)
    except Exception as exc:  # no server, or GetStatus failing
        print(f"grammar smoke: cannot check {args.target}: {exc.__class__.__name__}: {exc}",
              file=sys.stderr)
        return 2
    for p in problems:
        print(f"grammar smoke: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
