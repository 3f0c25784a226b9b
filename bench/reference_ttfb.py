"""First audio of a cloned voice (a 20 s reference clip) against a built-in voice, with the
prefix pool (the reference's KV computed once) and without it (prefilled with every
segment), at the same load, in one run (docs/voices.md, "The prefix pool").

    .venv/bin/python bench/reference_ttfb.py bench/results/reference-ttfb [--quick]

For each backend case (the demo model on the CPU: 1 and 32 concurrent sessions; the sim
with the h100-fp8 profile: 128), two servers one after the other, pool on
(engine.prefix_pool_mb 1024) and off (0), each serving the built-in voice "tara" and the
reference voice "clone"; orpheus-bench runs each voice at each level back to back on the
same server (whole-text input; playout pacing, but one session at a time back to back), so
a row's four TTFBs are one window's.
Writes <out>/<case>-<pool>-<voice>-<conc>.summary.json, table.json and table.txt (the
servers' logs stay in a temporary directory, removed at the end).

The clip is a synthetic 20 s tone (its SNAC tokens are what the prefix holds; what it
sounds like does not change the cost), its transcript 264 characters: a prefix of about
1,720 tokens, as a real 20 s reference has. Timing is never a test: this is a benchmark.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import wave
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PY = str(ROOT / ".venv/bin/python")
TRANSCRIPT = ("A long rising tone that goes on and on, for about twenty seconds, while the "
              "speaker says nothing in particular and the listener waits patiently for it "
              "to end, counting the seconds one by one until the very last one has passed "
              "and the recording stops at last.")
# (case, server flags, levels); the sim's codec is its own, so its reference is encoded by
# a tiny random SNAC (the encoder's cost is start-up's, not first audio's)
SINGLE_ROUNDS = 5
CASES = {
    "demo-cpu": ([], [1, 32]),
    "sim-h100": (["--backend", "sim", "--sim-profile", "h100-fp8",
                  "--set", "engine.max_sessions=160", "--set", "engine.max_batch_size=160",
                  "--set", "engine.max_waiting=160"], [128]),
}


def write_clip(path: Path, seconds: float = 20.0, rate: int = 24000) -> None:
    t = np.arange(int(seconds * rate)) / rate
    x = 0.3 * np.sin(2 * np.pi * (200 + 300 * t / seconds) * t) * (0.6 + 0.4 * np.sin(6 * np.pi * t))
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((x * 32767).astype("<i2").tobytes())


def serving(port: int) -> bool:
    code = ("import grpc,sys; from orpheus_tts_client.proto.v1 import tts_pb2 as p, "
            "tts_pb2_grpc as g; c=grpc.insecure_channel('localhost:%d'); "
            "sys.exit(0 if g.TTSServiceStub(c).GetStatus(p.GetStatusRequest(), "
            "timeout=1).serving else 1)" % port)
    return subprocess.run([PY, "-c", code], capture_output=True).returncode == 0


def start(flags: list[str], pool_mb: int, port: int, clip: Path, snac: str | None,
          log: Path) -> subprocess.Popen:
    env = dict(os.environ, ORPHEUS_MODEL__REFERENCE_VOICES=json.dumps(
        [{"name": "clone", "clip": str(clip), "transcript": TRANSCRIPT}]))
    cmd = [str(ROOT / ".venv/bin/orpheus-svc"), "serve", "--port", str(port), *flags,
           "--set", f"engine.prefix_pool_mb={pool_mb}"]
    if snac:
        cmd += ["--snac", snac]
    proc = subprocess.Popen(cmd, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    for _ in range(240):
        if proc.poll() is not None:
            raise RuntimeError(f"server exited {proc.returncode}; see {log}")
        if serving(port):
            return proc
        time.sleep(1)
    proc.kill()
    raise RuntimeError(f"server did not start; see {log}")


def bench(port: int, pid: int, voice: str, conc: int, rounds: int, out: Path, label: str) -> dict:
    # one session at a time runs back to back (nothing overlaps: the demo is slower than
    # real time), a load with playout pacing
    pace = "none" if conc == 1 else "playout"
    subprocess.run([str(ROOT / ".venv/bin/orpheus-bench"), "scaling", "--target",
                    f"localhost:{port}", "--concurrent", str(conc), "--rounds", str(rounds),
                    "--pace", pace,
                    "--voice", voice, "--server-pid", str(pid), "--label", label,
                    "--warmup", "1", "--no-raw", "--output", str(out)],
                   check=True, env=dict(os.environ, PYTHONPATH=str(ROOT / "bench")),
                   stdout=subprocess.DEVNULL)
    run = json.loads(out.read_text())["runs"][-1]
    return {"ttfb_p50_ms": run["ttfb_ms"]["p50"], "ttfb_p95_ms": run["ttfb_ms"]["p95"],
            "sessions": run["sessions"], "underruns": run["underruns"],
            "success_rate": run["success_rate"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--quick", action="store_true", help="one round per level (a smoke run)")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--levels", default="", help="only these levels, e.g. 1 (default: each case's)")
    ap.add_argument("--port", type=int, default=50170)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rounds = 1 if args.quick else 2
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        clip = Path(tmp) / "clip.wav"
        write_clip(clip)
        sys.path.insert(0, str(ROOT))
        from orpheus_svc.audio.codec import SNAC_24KHZ_CONFIG, write_random_snac
        tiny = str(write_random_snac(Path(tmp) / "snac", seed=3,
                                     config={**SNAC_24KHZ_CONFIG, "encoder_dim": 4,
                                             "decoder_dim": 64}))
        for case in args.cases.split(","):
            flags, levels = CASES[case]
            if args.levels:
                levels = [c for c in levels if str(c) in args.levels.split(",")]
            for pool_mb in (1024, 0):
                pool = "pool" if pool_mb else "no-pool"
                proc = start(flags, pool_mb, args.port, clip,
                             tiny if case.startswith("sim") else None,
                             Path(tmp) / f"server-{case}-{pool}.log")
                try:
                    for conc in levels:
                        for voice in ("tara", "clone"):
                            name = f"{case}-{pool}-{voice}-{conc}"
                            # one session at a time: 5 of them, back to back
                            got = bench(args.port, proc.pid, voice, conc,
                                        SINGLE_ROUNDS if conc == 1 else rounds,
                                        out / f"{name}.summary.json", name)
                            rows.append({"case": case, "pool": pool, "voice": voice,
                                         "concurrency": conc, **got})
                            print(json.dumps(rows[-1]), flush=True)
                finally:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(60)
    (out / "table.json").write_text(json.dumps(rows, indent=1) + "\n")
    (out / "table.txt").write_text(table(rows))
    print(table(rows))


def table(rows: list[dict]) -> str:
    """TTFB p50/p95 per case, level and pool, the clone against tara in the same server."""
    lines = ["| case | sessions | prefix pool | tara p50 / p95 ms | clone p50 / p95 ms | "
             "clone p95 / tara p95 |", "|---|---|---|---|---|---|"]
    key = {(r["case"], r["concurrency"], r["pool"], r["voice"]): r for r in rows}
    for case, conc, pool in dict.fromkeys((r["case"], r["concurrency"], r["pool"]) for r in rows):
        t, c = key.get((case, conc, pool, "tara")), key.get((case, conc, pool, "clone"))
        if not (t and c):
            continue
        lines.append(f"| {case} | {conc} | {pool} | {t['ttfb_p50_ms']:.0f} / "
                     f"{t['ttfb_p95_ms']:.0f} | {c['ttfb_p50_ms']:.0f} / {c['ttfb_p95_ms']:.0f} | "
                     f"{c['ttfb_p95_ms'] / t['ttfb_p95_ms']:.2f}x |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
