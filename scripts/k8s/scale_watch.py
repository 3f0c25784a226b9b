"""The HPA, the pods and each pod's own session counts every second during the scale step
(scripts/k8s/scale-step.sh), until SIGTERM: one JSON object a line, appended as it is taken
(so the check can read the timeline while it grows; scale_report.py reads it).

A row: t (epoch seconds); hpa: desired and current replicas and the External metric's value
as the HPA last read it (KEDA's metrics server); ready: the Ready pods not terminating;
terminating: pod -> its container's exit code (None while it runs); sessions: pod ->
[orpheus_sessions_active, orpheus_sessions_total] scraped straight from the pod's metrics
port (Prometheus's 5 s scrape is too coarse to time a first session)."""

import argparse
import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pod_state import add_pod  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--kubeconfig", required=True)
ap.add_argument("--out", required=True)
ap.add_argument("--metrics-port", type=int, default=9090)
args = ap.parse_args()
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))


def get(what: str) -> dict:
    out = subprocess.run(["kubectl", "--kubeconfig", args.kubeconfig, "get", *what.split(),
                          "-o", "json"], capture_output=True, text=True, timeout=10)
    return json.loads(out.stdout) if out.returncode == 0 else {}


def parse_sessions(text: str) -> list:
    """[orpheus_sessions_active, orpheus_sessions_total] from a Prometheus text page."""
    found = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in ("orpheus_sessions_active", "orpheus_sessions_total"):
            found[name] = float(value)
    return [found.get("orpheus_sessions_active"), found.get("orpheus_sessions_total")]


def scrape(ip: str) -> list | None:
    try:
        with urllib.request.urlopen(f"http://{ip}:{args.metrics_port}/metrics", timeout=1) as r:
            return parse_sessions(r.read().decode())
    except OSError:
        return None


def row() -> dict:
    hpa = get("hpa orpheus-svc")
    st = hpa.get("status", {})
    value = None
    for m in st.get("currentMetrics") or []:
        value = (m.get("external") or {}).get("current", {}).get("averageValue", value)
    r = {"t": time.time(), "hpa": {"desired": st.get("desiredReplicas"),
                                   "current": st.get("currentReplicas"), "value": value},
         "ready": [], "terminating": {}, "sessions": {}}
    for p in get("pods -l app.kubernetes.io/name=orpheus-svc").get("items", []):
        add_pod(r, p)
        ip = p["status"].get("podIP")
        if ip:
            r["sessions"][p["metadata"]["name"]] = scrape(ip)
    return r


if __name__ == "__main__":
    with open(args.out, "a") as f:
        while True:
            t = time.time()
            try:
                f.write(json.dumps(row()) + "\n")
                f.flush()
            except (subprocess.TimeoutExpired, json.JSONDecodeError):
                pass
            time.sleep(max(0.0, 1.0 - (time.time() - t)))
