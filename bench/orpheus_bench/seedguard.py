"""The verdict of scripts/seed-load-guard.sh (issue 33): seeded load costs no capacity.

    PYTHONPATH=bench python -m orpheus_bench.seedguard RESULTS_DIR [--json verdict.json]

Reads the orpheus-bench summaries the script wrote (NAME.summary.json, NAME one of
unseeded-K, seeded-K and, with a BASE_REF, base-unseeded-K and base-seeded-K), and checks,
for this checkout's server:

* cost: mean CPU-seconds per audio-second of the seeded runs <= 1.10 x the unseeded runs';
* TTFB p95 <= 150 ms and no underrun in every run, seeded or not.

The base server's runs are reported beside them (an A/B in the same window) and not judged.
Exit status 0 when the guard holds, 1 when it does not, 2 when runs are missing.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

MAX_COST_RATIO = 1.10
MAX_TTFB_P95_MS = 150.0
_NAME = re.compile(r"^(base-)?(unseeded|seeded)-\d+$")


def run_figures(summary: dict) -> dict:
    """The figures the guard reads from one orpheus-bench summary (its single level)."""
    r = summary["runs"][-1]
    sim = r.get("sim") or {}
    return {"seeded": r.get("seeded"), "sessions": r["requests"],
            "ttfb_p95_ms": r["ttfb_ms"]["p95"], "underruns": r["underruns"]["events_total"],
            "sessions_underran": r["underruns"].get("sessions_with_underrun"),
            "cpu_s_per_audio_s": (r.get("server") or {}).get("cpu_s_per_audio_s"),
            "host_bound_steps": sim.get("host_bound_steps"), "steps": sim.get("steps")}


def judge(runs: dict[str, dict]) -> dict:
    """The verdict over {name: run_figures}: the groups' means and each bound's outcome."""
    groups: dict[str, list[dict]] = {}
    for name, fig in runs.items():
        m = _NAME.match(name)
        if m:
            groups.setdefault((m.group(1) or "") + m.group(2), []).append(fig)
    if not groups.get("unseeded") or not groups.get("seeded"):
        return {"ok": False, "missing": True, "groups": {}, "checks": {}}

    def mean(figs, key):
        vals = [f[key] for f in figs if f.get(key) is not None]
        return sum(vals) / len(vals) if vals else None

    summary = {g: {"runs": len(f), "cpu_s_per_audio_s": mean(f, "cpu_s_per_audio_s"),
                   "ttfb_p95_ms": [x["ttfb_p95_ms"] for x in f],
                   "underruns": [x["underruns"] for x in f],
                   "host_bound_steps": [x["host_bound_steps"] for x in f]}
               for g, f in sorted(groups.items())}
    seeded, unseeded = summary["seeded"], summary["unseeded"]
    ratio = (None if not unseeded["cpu_s_per_audio_s"] or seeded["cpu_s_per_audio_s"] is None
             else seeded["cpu_s_per_audio_s"] / unseeded["cpu_s_per_audio_s"])
    ours = groups["seeded"] + groups["unseeded"]
    checks = {
        "cost_ratio": ratio,
        "cost_ok": ratio is not None and ratio <= MAX_COST_RATIO,
        "ttfb_ok": all(f["ttfb_p95_ms"] is not None and f["ttfb_p95_ms"] <= MAX_TTFB_P95_MS
                       for f in ours),
        "underruns_ok": all(f["underruns"] == 0 for f in ours),
    }
    ok = checks["cost_ok"] and checks["ttfb_ok"] and checks["underruns_ok"]
    return {"ok": ok, "bounds": {"max_cost_ratio": MAX_COST_RATIO,
                                 "max_ttfb_p95_ms": MAX_TTFB_P95_MS, "max_underruns": 0},
            "groups": summary, "checks": checks}


def load_runs(results: Path) -> dict[str, dict]:
    """run_figures of every NAME.summary.json in `results`, by NAME (also tracingab's)."""
    return {p.name[:-len(".summary.json")]: run_figures(json.loads(p.read_text()))
            for p in sorted(results.glob("*.summary.json"))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="orpheus_bench.seedguard", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    runs = load_runs(args.results)
    verdict = judge(runs)
    verdict["runs"] = runs
    if args.json:
        args.json.write_text(json.dumps(verdict, indent=1) + "\n")
    for name, g in verdict["groups"].items():
        print(f"{name:<16} cpu/aud {g['cpu_s_per_audio_s']:.5f}  ttfb p95 {g['ttfb_p95_ms']}  "
              f"underruns {g['underruns']}  host-bound steps {g['host_bound_steps']}")
    if verdict.get("missing"):
        print("seed guard: unseeded or seeded runs missing", file=sys.stderr)
        return 2
    c = verdict["checks"]
    print(f"seed guard: {'OK' if verdict['ok'] else 'FAILED'} (seeded/unseeded cost "
          f"{c['cost_ratio']:.3f} <= {MAX_COST_RATIO}: {c['cost_ok']}; TTFB p95 <= "
          f"{MAX_TTFB_P95_MS:g} ms: {c['ttfb_ok']}; no underrun: {c['underruns_ok']})")
    return 0 if verdict["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
