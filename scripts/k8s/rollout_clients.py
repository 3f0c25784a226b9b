"""Clients streaming sessions in a loop until --stop-file exists (scripts/k8s-check.sh's
rollout). Each client thread opens one session after another over one Client on --target
(a dns:/// name of the headless Service, re-resolved by gRPC as pods come and go; resume on,
as for every dns: target). Writes every session's Outcome to --out as JSON."""

import argparse
import dataclasses
import json
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from orpheus_tts_client import Client  # noqa: E402
from k8s_sessions import run_session  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--target", required=True)
ap.add_argument("--clients", type=int, default=4)
ap.add_argument("--stop-file", required=True)
ap.add_argument("--out", required=True)
args = ap.parse_args()
results: list = []
lock = threading.Lock()


def client(i: int) -> None:
    # re-resolve at most every 0.5 s (gRPC's default waits 30 s between resolutions)
    with Client(args.target, timeout=600,
                options=[("grpc.dns_min_time_between_resolutions_ms", 500)]) as tts:
        n = 0
        while not os.path.exists(args.stop_file):
            out = run_session(tts, seed=1000 * i + n)
            n += 1
            with lock:
                results.append(dataclasses.asdict(out) | {"client": i})
            print(f"{time.time():.3f} client {i} session {n} "
                  f"{'finished' if out.ok and not out.resumes else 'resumed' if out.ok else 'FAILED'}"
                  f" resumes={out.resumes} {out.ended - out.started:.1f}s {out.error}", flush=True)


threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
for t in threads:
    t.start()
for t in threads:
    t.join()
Path(args.out).write_text(json.dumps(results, indent=1))
