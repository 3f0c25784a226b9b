"""Output: the JSON document, a short table on stderr, and PNG plots (matplotlib, optional)."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Callable

#: Work of one CPU probe: CPython's sum over range(PROBE_N), single-threaded.
PROBE_N = 10**6


def cpu_probe_ms(repeat: int = 5, clock: Callable[[], float] = time.perf_counter) -> float:
    """The fastest of `repeat` timings of sum(range(PROBE_N)) on this process's core, in ms.

    A reference for the machine's speed at the run's start, so that runs from different
    windows or VMs can be told apart (the same code has measured 3-4x slower per row on
    some VMs; BENCHMARKS.md). It is no benchmark of the server: compare figures only
    within a window, and use this to say which windows were alike."""
    best = float("inf")
    for _ in range(max(1, repeat)):
        t0 = clock()
        sum(range(PROBE_N))
        best = min(best, clock() - t0)
    return best * 1000


def machine() -> dict:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        affinity = sorted(os.sched_getaffinity(0))
    except AttributeError:
        affinity = None
    import grpc

    return {"platform": platform.platform(), "cpu": cpu, "cpu_count": os.cpu_count(),
            "bench_affinity": affinity, "python": platform.python_version(),
            "grpcio": grpc.__version__, "cpu_probe_ms": round(cpu_probe_ms(), 2)}


def write_json(path: str | os.PathLike, doc: dict) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(p.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    tmp.replace(p)


def _f(v, fmt="{:.0f}") -> str:
    return "-" if v is None else fmt.format(v)


HEADER = (f"{'label':<9}{'seed':>5}{'conc':>5}{'n':>5}{'ok%':>6}{'ttfb p50':>9}{'p95':>7}{'p99':>7}"
          f"{'txt p95':>8}{'rtf p50':>8}{'underr':>7}{'stall ms':>9}{'aud s/s':>8}{'tok/s':>7}"
          f"{'srv cpu':>8}{'cpu/aud':>8}{'load cpu':>9}{'SLO':>5}")


def _by_wake(sim: dict) -> str:
    """How much of the host-bound time late wake-ups caused (absent in older stats)."""
    if "host_bound_by_wake_steps" not in sim:
        return ""
    return (f"; {sim['host_bound_by_wake_steps']} steps and {sim['host_excess_wake_s']:.2f} s "
            f"of it from {sim['late_wakes']} late wake-ups")


def row(r: dict) -> str:
    srv, load, u = r.get("server", {}), r.get("load", {}), r["underruns"]
    ok = None if r["success_rate"] is None else 100 * r["success_rate"]
    seeded = {True: "yes", False: "no"}.get(r.get("seeded"), "-")  # "-": before issue 33
    return (f"{r['label'][:8]:<9}{seeded:>5}{r['concurrency']:>5}{r['requests']:>5}{_f(ok):>6}"
            f"{_f(r['ttfb_ms']['p50']):>9}{_f(r['ttfb_ms']['p95']):>7}{_f(r['ttfb_ms']['p99']):>7}"
            f"{_f(r['ttfb_text_ms']['p95']):>8}{_f(r['rtf']['p50'], '{:.2f}'):>8}"
            f"{u['events_total']:>7}{_f(u['stall_ms_total']):>9}"
            f"{_f(r['audio_s_per_wall_s'], '{:.1f}'):>8}"
            f"{_f(srv.get('tokens_per_s') or r['tokens_per_s']):>7}"
            f"{_f(srv.get('cpu_util'), '{:.2f}'):>8}{_f(srv.get('cpu_s_per_audio_s'), '{:.4f}'):>8}"
            f"{_f(sum(load.get('cpu_util_per_proc', [])) or None, '{:.2f}'):>9}"
            f"{'ok' if r['slo']['pass'] else 'FAIL':>5}")


def table(results: list[dict], out=None) -> None:
    out = out or sys.stderr
    print(HEADER, file=out)
    for r in results:
        print(row(r), file=out)
    notes = [f"  conc {r['concurrency']}: load generator may be saturated "
             f"(cpu {r['load']['cpu_util_per_proc']}, loop lag p99 "
             f"{r['load']['loop_lag_ms_p99_max']:.1f} ms)"
             for r in results if r.get("load", {}).get("maybe_saturated")]
    notes += [f"  conc {r['concurrency']}: sim {r['sim'].get('steps')} steps, "
              f"{r['sim']['host_bound_steps']} host-bound ({r['sim']['host_excess_s']:.2f} s "
              f"over the GPU model{_by_wake(r['sim'])}); step ms p50/p95/p99/max "
              + "/".join(_f(r['sim']['step_ms'][k], "{:.1f}") for k in ("p50", "p95", "p99", "max"))
              for r in results if r.get("sim")]
    for n in notes:
        print(n, file=out)
    out.flush()


def plot(results: list[dict], out_dir: str | os.PathLike, title: str, slo_ms: float) -> list[str]:
    """ttfb.png (p50/p95/p99 vs concurrency) and underruns.png; needs matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise SystemExit("--plot needs matplotlib: pip install 'orpheus-svc[bench]' "
                         "(or pip install matplotlib)") from exc
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    rs = sorted((r for r in results if r["label"] != "warm-up"), key=lambda r: r["concurrency"])
    xs = [r["concurrency"] for r in rs]
    files = []
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for q, style in (("p50", "o-"), ("p95", "s-"), ("p99", "^-")):
        ax.plot(xs, [r["ttfb_ms"][q] for r in rs], style, label=f"TTFB {q}")
    if any(r["input"] == "streaming" for r in rs):
        ax.plot(xs, [r["ttfb_text_ms"]["p95"] for r in rs], "d--",
                label="TTFB p95 after segment text")
    ax.axhline(slo_ms, color="red", lw=0.8, ls=":", label=f"SLO {slo_ms:g} ms")
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.minorticks_off()
    if max((r["ttfb_ms"]["p99"] or 0) for r in rs) > 10 * slo_ms:
        ax.set_yscale("log")
    ax.set_xlabel("concurrent sessions (real-time listeners)")
    ax.set_ylabel("ms")
    ax.set_title(f"Time to first audio - {title}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    files.append(str(d / "ttfb.png"))
    fig.savefig(files[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.bar([str(x) for x in xs], [r["underruns"]["sessions_with_underrun"] for r in rs],
           color="tab:orange", label="sessions with an underrun")
    ax.set_xlabel("concurrent sessions (real-time listeners)")
    ax.set_ylabel("sessions")
    ax2 = ax.twinx()
    ax2.plot([str(x) for x in xs], [r["underruns"]["stall_ms_per_session"]["p95"] or 0 for r in rs],
             "k.-", label="stall ms per session p95")
    ax2.set_ylabel("stall ms (p95 per session)")
    ax.set_title(f"Underruns (100 ms jitter buffer) - {title}", fontsize=10)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=8, loc="upper left")
    fig.tight_layout()
    files.append(str(d / "underruns.png"))
    fig.savefig(files[-1], dpi=110)
    plt.close(fig)
    return files
