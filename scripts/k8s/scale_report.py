"""The scale step's result (scripts/k8s/scale-step.sh), from scale_watch.py's timeline and the
clients' outcomes.

    scale_report.py WATCH.jsonl LOAD-START UNLOAD A.json B.json [POD.log ...]
        lines for the results file; exit 1 unless every session ended whole, the HPA asked
        for 3 or more pods, a pod added under load served a session, a pod was removed after
        the load dropped and the Deployment ended at 2 Ready pods with never fewer than 2
    scale_report.py --new-pod-served WATCH.jsonl
        exit 0 once a pod that was not there at the first row has started a session
    scale_report.py --per-pod < ANSWER.json
        "pod n, ..." from a Prometheus query's answer (sessions started per pod)

LOAD-START and UNLOAD are files holding the epoch seconds at which the clients began and at
which group B was told to stop. A pod's log (kubectl logs -f, JSON lines) gives the sessions
it held when it began to shut down."""

from __future__ import annotations

import json
import sys
from collections import Counter


def read_rows(path: str) -> list[dict]:
    rows = []
    for line in open(path).read().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:  # the last line, while it is being written
            pass
    return rows


def first_pods(rows: list[dict]) -> set[str]:
    return set(rows[0]["ready"]) | set(rows[0]["sessions"]) if rows else set()


def started(row: dict, pod: str) -> float:
    """orpheus_sessions_total of pod in row (0 when unknown)."""
    s = row["sessions"].get(pod)
    return (s[1] or 0.0) if s else 0.0


def new_pod_first_session(rows: list[dict]) -> tuple[str, float] | None:
    """(pod, t) of the first row in which a pod absent from the first row had started a
    session, or None."""
    before = first_pods(rows)
    for r in rows:
        for pod in r["sessions"]:
            if pod not in before and started(r, pod) > 0:
                return pod, r["t"]
    return None


def quantity(q: str) -> float:
    """A Kubernetes quantity as the HPA writes a metric's value ("2667m", "3", "1500u")."""
    scale = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3}
    return float(q[:-1]) * scale[q[-1]] if q[-1] in scale else float(q)


def first_t(rows: list[dict], test, after: float = 0.0) -> float | None:
    return next((r["t"] for r in rows if r["t"] >= after and test(r)), None)


def drain_seconds(rows: list[dict], pod: str) -> float:
    seen = [r["t"] for r in rows if pod in r["terminating"]]
    return seen[-1] - seen[0] if seen else 0.0


def shutting_down(log: str) -> dict | None:
    for line in log.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("event") == "shutting down":
            return rec
    return None


def sessions_line(clients: list[dict], groups: dict[str, int]) -> tuple[str, int]:
    c = Counter("failed" if not o["ok"] else "resumed" if o["resumes"] else "finished"
                for o in clients)
    line = (f"scale sessions: {len(clients)} started ("
            + ", ".join(f"group {g} {n}" for g, n in groups.items())
            + f"), {c['finished']} finished on their pod, {c['resumed']} resumed on another "
            f"(resumes {sum(o['resumes'] for o in clients)}), {c['failed']} failed or cut; "
            f"{sum(o['samples'] for o in clients if o['ok']) / 24000:.0f} s of audio received")
    return line, c["failed"]


def summarise(rows: list[dict], load_start: float, unload: float, a: list[dict],
              b: list[dict], logs: dict[str, str]) -> tuple[list[str], bool]:
    """The report's lines and whether the step passed (see the module doc)."""
    lines, problems = [], []
    clients = a + b
    line, failed = sessions_line(clients, {"A": len(a), "B": len(b)})
    lines.append(line)
    lines += [f"  FAILED client {o['client']}: {o['error']}" for o in clients if not o["ok"]]
    if failed or not a or not b:
        problems.append("sessions failed or none ran")
    before = first_pods(rows)
    desired = [r["hpa"]["desired"] or 0 for r in rows]
    t3 = first_t(rows, lambda r: (r["hpa"]["desired"] or 0) >= 3)
    new = new_pod_first_session(rows)
    added = sorted({p for r in rows for p in r["ready"]} - before)
    ready_at = {p: first_t(rows, lambda r, p=p: p in r["ready"]) for p in added}
    values = [quantity(r["hpa"]["value"]) for r in rows if r["hpa"].get("value")]
    if max(desired, default=0) < 3:
        problems.append("the HPA never asked for 3 pods")
    if not new:
        problems.append("no pod added under load served a session")
    rel = lambda t: "-" if t is None else f"+{t - load_start:.0f} s"  # noqa: E731
    out = f"scale out: the HPA asked for {max(desired, default=0)} pods at {rel(t3)} " \
          f"(the External metric as KEDA served it: up to {max(values, default=0):.2f} open " \
          f"calls a pod); pods added: " + (", ".join(
              f"{p} Ready at {rel(ready_at[p])}" for p in added) or "none")
    if new:
        pod, t = new
        after = f", {t - ready_at[pod]:.0f} s after it was Ready" if ready_at.get(pod) else ""
        sessions = max(started(r, pod) for r in rows)
        out += f"; its first session (a channel opened before it existed) at {rel(t)}{after}; " \
               f"{sessions:.0f} sessions started on it"
    lines.append(out)
    removed = sorted({p for r in rows if r["t"] >= unload for p in r["terminating"]})
    t2 = first_t(rows, lambda r: r["hpa"]["desired"] == 2, after=unload)
    last = rows[-1] if rows else {"ready": [], "terminating": {}}
    if not removed:
        problems.append("no pod removed after the load dropped")
    if len(last["ready"]) != 2 or last["terminating"]:
        problems.append(f"ended with {len(last['ready'])} Ready and {len(last['terminating'])} terminating pods")
    min_ready = min((len(r["ready"]) for r in rows), default=0)
    if min_ready < 2:
        problems.append(f"Ready pods fell to {min_ready}")
    rel_u = lambda t: "-" if t is None else f"+{t - unload:.0f} s"  # noqa: E731
    out = f"scale in: the HPA asked for 2 pods at {rel_u(t2)} after group B stopped; removed: "
    parts = []
    for pod in removed:
        codes = {r["terminating"][pod] for r in rows if r["terminating"].get(pod) is not None}
        down = shutting_down(logs.get(pod, ""))
        held = (f"'shutting down' with {down.get('active_sessions')} sessions open, grace "
                f"{down.get('grace_s')} s" if down else "no 'shutting down' in its log")
        parts.append(f"{pod} terminating at {rel_u(first_t(rows, lambda r, p=pod: p in r['terminating']))} "
                     f"for {drain_seconds(rows, pod):.0f} s, exit codes {sorted(codes) or 'not seen'}, {held}")
    lines.append(out + ("; ".join(parts) or "none"))
    lines.append(f"scale pods: Ready pods never below {min_ready}; at the end {len(last['ready'])} "
                 f"Ready, {len(last['terminating'])} terminating")
    lines += [f"  PROBLEM: {p}" for p in problems]
    return lines, not problems


def per_pod(answer: dict) -> str:
    """'pod n, ...' from a Prometheus instant query's answer with a pod label."""
    res = sorted(answer["data"]["result"], key=lambda r: r["metric"]["pod"])
    return ", ".join(f"{r['metric']['pod']} {float(r['value'][1]):.0f}" for r in res)


def main(argv: list[str]) -> int:
    if argv[0] == "--new-pod-served":
        return 0 if new_pod_first_session(read_rows(argv[1])) else 1
    if argv[0] == "--per-pod":
        print(per_pod(json.load(sys.stdin)))
        return 0
    rows = read_rows(argv[0])
    load_start, unload = (float(open(p).read()) for p in argv[1:3])
    a, b = (json.load(open(p)) for p in argv[3:5])
    logs = {p.rsplit("scale-", 1)[-1].removesuffix(".log"): open(p).read() for p in argv[5:]}
    lines, ok = summarise(rows, load_start, unload, a, b, logs)
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
