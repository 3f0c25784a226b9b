"""Clients streaming sessions in a loop until --stop-file exists (scripts/k8s-check.sh's
rollout and scale steps). Each client thread opens one session after another over one
Client on --target (a dns:/// name of the headless Service, re-resolved by gRPC as pods come and go; resume on,
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
ap.add_argument("--first-client", type=int, default=0,
                help="number of the first client (seeds and the JSON's client field)")
ap.add_argument("--dns-min-resolution-ms", type=int, default=500,
                help="grpc.dns_min_time_between_resolutions_ms (gRPC's own default: 30000)")
ap.add_argument("--stop-file", required=True)
ap.add_argument("--out", required=True)
args = ap.parse_args()
results: list = []
lock = threading.Lock()


def client(i: int) -> None:
    # the rollout re-resolves at most every 0.5 s; the scale step keeps gRPC's default (30 s)
    with Client(args.target, timeout=600, options=[
            ("grpc.dns_min_time_between_resolutions_ms", args.dns_min_resolution_ms)]) as tts:
        n = 0
        while not os.path.exists(args.stop_file):
            out = run_session(tts, seed=1000 * i + n)
            n += 1
            with lock:
                results.append(dataclasses.asdict(out) | {"client": i})
            print(f"{time.time():.3f} client {i} session {n} "
                  f"{'finished' if out.ok and not out.resumes else 'resumed' if out.ok else 'FAILED'}"
                  f" resumes={out.resumes} {out.ended - out.started:.1f}s {out.error}", flush=True)


threads = [threading.Thread(target=client, args=(args.first_client + i,))
           for i in range(args.clients)]
for t in threads:
    t.start()
for t in threads:
    t.join()
Path(args.out).write_text(json.dumps(results, indent=1))
