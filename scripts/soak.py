"""Soak a running orpheus-svc with hostile and broken clients (issue 10; run by scripts/soak.sh).

N sessions, `--concurrency` at a time, each one of (weights in MIX):
    ok       config, two short sentences, half-close; read everything
    cancel   as ok, cancelled after a random number of responses
    garbage  config, then bytes that are no message (INVALID_ARGUMENT expected)
    badfirst garbage as the first message (INVALID_ARGUMENT expected)
    idle     config and a clause, then nothing (the idle timeout ends it)
    stall    a long text, never read (the stalled-consumer timeout ends it), then cancelled
    refused  an unknown voice (INVALID_ARGUMENT expected)

Measures the server process (--pid) from /proc: RSS and open fds at the start, after the
warm-up sessions, and at the end; then GetStatus (open calls, generations, free slots).
Writes one JSON object (--out) and prints a summary. Exit 1 if anything leaked.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import random
import time

import grpc
from orpheus_tts_client.proto.v1 import tts_pb2 as pb
from orpheus_tts_client.proto.v1 import tts_pb2_grpc

SERVICE = "/orpheus.tts.v1.TTSService/StreamingSynthesize"
MIX = {"ok": 50, "cancel": 15, "garbage": 10, "badfirst": 5, "idle": 8, "stall": 4,
       "refused": 8}
# what each kind may end with (docs/api.md); anything else is recorded with its details
EXPECTED = {"ok": {"OK"}, "cancel": {"CANCELLED", "OK"}, "garbage": {"INVALID_ARGUMENT"},
            "badfirst": {"INVALID_ARGUMENT"}, "idle": {"DEADLINE_EXCEEDED"},
            "stall": {"DEADLINE_EXCEEDED"}, "refused": {"INVALID_ARGUMENT"}}
UNEXPECTED: list[str] = []
CONFIG = pb.StreamingSynthesizeRequest(config=pb.SynthesisConfig(voice="tara")).SerializeToString()


def _text(t: str) -> bytes:
    return pb.StreamingSynthesizeRequest(text=t).SerializeToString()


def proc_figures(pid: int) -> dict:
    rss_kb = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss_kb = int(line.split()[1])
    return {"rss_mb": round(rss_kb / 1024, 1), "fds": len(os.listdir(f"/proc/{pid}/fd"))}


async def one(channel, kind: str, rng: random.Random, stall_s: float) -> str:
    """Run one session of `kind`; returns the status code name it ended with."""
    done = asyncio.Event()
    texts = [_text("Hello there, this is a soak test."), _text(" How are you today?")]
    if kind == "ok" or kind == "cancel":
        msgs = [CONFIG, *texts]
    elif kind == "garbage":
        msgs = [CONFIG, texts[0], bytes(rng.randrange(256) for _ in range(rng.randint(1, 9))),
                b"\x12\x02\xff\xfe"]
    elif kind == "badfirst":
        msgs = [b"\xff\xff\xff\xff"]
    elif kind == "idle":
        msgs = [CONFIG, _text("A clause with no end")]
    elif kind == "stall":
        msgs = [CONFIG, _text("This long sentence is never read by the client. " * 40)]
    else:  # refused
        msgs = [pb.StreamingSynthesizeRequest(config=pb.SynthesisConfig(voice="nobody"))
                .SerializeToString(), texts[0]]

    async def requests():
        for m in msgs:
            yield m
        if kind in ("idle", "stall"):
            await done.wait()  # keep the stream open

    call = channel.stream_stream(SERVICE, request_serializer=None,
                                 response_deserializer=pb.StreamingSynthesizeResponse.FromString
                                 )(requests(), timeout=120)
    try:
        if kind == "stall":
            # read nothing for longer than the server's stalled-consumer timeout, then read:
            # the audio sent before, then the status the server ended the call with
            await asyncio.sleep(stall_s + 1.0)
            async for _ in call:
                pass
            return (await call.code()).name
        cancel_after = rng.randint(0, 6) if kind == "cancel" else None
        n = 0
        async for _ in call:
            n += 1
            if cancel_after is not None and n > cancel_after:
                call.cancel()
                break
        return (await call.code()).name
    except grpc.aio.AioRpcError as exc:
        if exc.code().name not in EXPECTED[kind]:
            UNEXPECTED.append(f"{kind}: {exc.code().name}: {exc.details()}")
        return exc.code().name
    except asyncio.CancelledError:
        return "CANCELLED"
    finally:
        done.set()


async def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--sessions", type=int, default=10000)
    ap.add_argument("--warmup", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=48)
    ap.add_argument("--stall-timeout", type=float, default=2.0,
                    help="the server's session.stalled_consumer_timeout_seconds")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    kinds = rng.choices(list(MIX), weights=list(MIX.values()), k=a.sessions)
    channel = grpc.aio.insecure_channel(a.target)
    # Stalling clients get their own connection without BDP probing: its HTTP/2 window stays
    # at 64 KiB, so unread audio blocks the server at once (with a grown window a few MB of
    # audio fit in the buffers, the generation ends, and the idle timeout ends the call).
    stall_channel = grpc.aio.insecure_channel(a.target, options=[("grpc.http2.bdp_probe", 0)])
    stub = tts_pb2_grpc.TTSServiceStub(channel)
    await stub.GetStatus(pb.GetStatusRequest())  # connect both before the first measurement
    await tts_pb2_grpc.TTSServiceStub(stall_channel).GetStatus(pb.GetStatusRequest())
    start = proc_figures(a.pid)
    statuses: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    after_warmup = None
    t0 = time.monotonic()
    sem = asyncio.Semaphore(a.concurrency)
    finished = 0
    durations: dict[str, list] = collections.defaultdict(list)

    async def run(i: int, kind: str) -> None:
        nonlocal finished, after_warmup
        async with sem:
            t = time.monotonic()
            code = await one(stall_channel if kind == "stall" else channel, kind,
                             random.Random(a.seed * 1_000_003 + i), a.stall_timeout)
            durations[kind].append(time.monotonic() - t)
        statuses[kind][code] += 1
        finished += 1
        if finished % 1000 == 0:
            print(f"  {finished} sessions, {time.monotonic() - t0:.0f} s, {proc_figures(a.pid)}",
                  flush=True)

    warm = [asyncio.create_task(run(i, k)) for i, k in enumerate(kinds[:a.warmup])]
    await asyncio.gather(*warm)
    after_warmup = proc_figures(a.pid)
    rest = [asyncio.create_task(run(i, k)) for i, k in enumerate(kinds[a.warmup:], a.warmup)]
    await asyncio.gather(*rest)
    wall = time.monotonic() - t0
    st = None
    for _ in range(200):  # the server's bookkeeping follows the last status by a moment
        st = await stub.GetStatus(pb.GetStatusRequest())
        if st.active_sessions == 0 and st.active_generations == 0:
            break
        await asyncio.sleep(0.05)
    end = proc_figures(a.pid)
    await channel.close()
    await stall_channel.close()
    leaked = {"open_calls": st.active_sessions, "active_generations": st.active_generations,
              "waiting_generations": st.waiting_generations,
              "slots_in_use": st.total_slots - st.free_slots}
    rss_growth = (end["rss_mb"] - after_warmup["rss_mb"]) / after_warmup["rss_mb"]
    result = {
        "sessions": a.sessions, "warmup": a.warmup, "concurrency": a.concurrency,
        "mix": MIX, "seed": a.seed, "wall_s": round(wall, 1),
        "statuses": {k: dict(v) for k, v in statuses.items()},
        "unexpected": UNEXPECTED[:20],
        "mean_session_s": {k: round(sum(v) / len(v), 3) for k, v in durations.items()},
        "process": {"start": start, "after_warmup": after_warmup, "end": end},
        "rss_growth_after_warmup": round(rss_growth, 4),
        "fd_delta": end["fds"] - start["fds"], "leaked": leaked,
        "server_counters": {"sessions_total": st.sessions_total,
                            "idle_timeouts_total": st.idle_timeouts_total,
                            "stalled_timeouts_total": st.stalled_timeouts_total,
                            "sessions_refused_total": st.sessions_refused_total,
                            "failed_generations_total": st.failed_generations_total},
    }
    with open(a.out, "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result, indent=2))
    ok = not any(leaked.values()) and rss_growth < 0.05 and result["fd_delta"] == 0
    print("soak:", "PASS" if ok else "FAIL", f"(RSS growth after warm-up {rss_growth:.1%}, "
          f"fd delta {result['fd_delta']}, leaked {leaked})")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
