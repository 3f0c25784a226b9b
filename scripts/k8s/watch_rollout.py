"""The pods and the PodDisruptionBudget every 0.5 s during the rollout (scripts/k8s-check.sh),
until SIGTERM: a JSON timeline of ready pods, terminating pods (with their container's exit
code once it has one) and the PDB's status."""

import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pod_state import add_pod  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--kubeconfig", required=True)
ap.add_argument("--out", required=True)
args = ap.parse_args()
timeline: list = []


def dump(*_):
    with open(args.out, "w") as f:
        json.dump(timeline, f)
    sys.exit(0)


signal.signal(signal.SIGTERM, dump)


def get(what: str) -> dict:
    out = subprocess.run(["kubectl", "--kubeconfig", args.kubeconfig, "get", *what.split(),
                          "-o", "json"], capture_output=True, text=True, timeout=10)
    return json.loads(out.stdout) if out.returncode == 0 else {}


while True:
    try:
        pods = get("pods -l app.kubernetes.io/name=orpheus-svc").get("items", [])
        pdb = get("pdb orpheus-svc").get("status", {})
    except (subprocess.TimeoutExpired, json.JSONDecodeError):
        continue
    row = {"t": time.time(), "ready": [], "terminating": {}, "pdb": {
        k: pdb.get(k) for k in ("currentHealthy", "desiredHealthy", "disruptionsAllowed")}}
    for p in pods:
        add_pod(row, p)
    timeline.append(row)
    time.sleep(0.5)
