"""The report of scripts/tracing-ab.sh (issue 35): what tracing costs the server.

    PYTHONPATH=bench python -m orpheus_bench.tracingab RESULTS_DIR [--json report.json]

Reads the orpheus-bench summaries the script wrote (NAME.summary.json, NAME one of base-K:
the code before tracing, off-K: this code with tracing off, on-K: tracing on at sampling
ratio 1.0, exporting every span to a local OTLP sink) and reports, per group, the server's
CPU-seconds per audio-second (mean and the runs), TTFB p95 and underruns, and the ratios
off/base and on/base. "Nothing measurable" is judged against the spread of the base runs
themselves: off/base is within noise when |off - base| is no larger than the base runs'
own range. A report, not a guard: the exit status is 0 whenever every group has runs.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from .seedguard import load_runs

_NAME = re.compile(r"^(base|off|on)-\d+$")


def report(runs: dict[str, dict]) -> dict:
    groups: dict[str, list[dict]] = {}
    for name, fig in sorted(runs.items()):
        m = _NAME.match(name)
        if m:
            groups.setdefault(m.group(1), []).append(fig)
    if not all(groups.get(g) for g in ("base", "off")):
        return {"missing": True, "groups": {}}

    def costs(figs):
        return [f["cpu_s_per_audio_s"] for f in figs if f.get("cpu_s_per_audio_s") is not None]

    summary = {}
    for g, figs in groups.items():
        c = costs(figs)
        summary[g] = {"runs": len(figs), "cpu_s_per_audio_s": c,
                      "mean": sum(c) / len(c) if c else None,
                      "ttfb_p95_ms": [f["ttfb_p95_ms"] for f in figs],
                      "underruns": [f["underruns"] for f in figs]}
    base = summary["base"]
    spread = max(base["cpu_s_per_audio_s"]) - min(base["cpu_s_per_audio_s"])
    out = {"groups": summary, "base_spread": spread}
    for g in ("off", "on"):
        if g in summary and base["mean"] and summary[g]["mean"] is not None:
            out[f"{g}_over_base"] = summary[g]["mean"] / base["mean"]
    if "off" in summary:
        out["off_within_base_noise"] = abs(summary["off"]["mean"] - base["mean"]) <= spread
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="orpheus_bench.tracingab", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    runs = load_runs(args.results)
    out = report(runs)
    out["runs"] = runs
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    if out.get("missing"):
        print("tracing A/B: base or off runs missing", file=sys.stderr)
        return 2
    for name, g in out["groups"].items():
        print(f"{name:<5} cpu/aud mean {g['mean']:.5f} runs {[round(c, 5) for c in g['cpu_s_per_audio_s']]}"
              f"  ttfb p95 {g['ttfb_p95_ms']}  underruns {g['underruns']}")
    print(f"off/base {out.get('off_over_base', float('nan')):.3f} (within the base runs' spread: "
          f"{out.get('off_within_base_noise')}); on/base {out.get('on_over_base', float('nan')):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
