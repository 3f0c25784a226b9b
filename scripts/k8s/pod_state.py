"""How the check's watchers (watch_rollout.py, scale_watch.py) read a pod: Ready and not
terminating, or terminating with its container's exit code (None while it runs)."""

from __future__ import annotations


def pod_state(pod: dict) -> tuple[str, int | None] | None:
    """("terminating", exit code or None), ("ready", None), or None (neither yet)."""
    if pod["metadata"].get("deletionTimestamp"):
        st = (pod["status"].get("containerStatuses") or [{}])[0].get("state", {})
        return "terminating", st.get("terminated", {}).get("exitCode")
    cond = {c["type"]: c["status"] for c in pod["status"].get("conditions", [])}
    return ("ready", None) if cond.get("Ready") == "True" else None


def add_pod(row: dict, pod: dict) -> None:
    """Puts pod into row["ready"] (a list) or row["terminating"] (name -> exit code)."""
    state = pod_state(pod)
    name = pod["metadata"]["name"]
    if state and state[0] == "terminating":
        row["terminating"][name] = state[1]
    elif state:
        row["ready"].append(name)
