"""orpheus-bench: how many real-time sessions an orpheus-svc server carries, over gRPC.

Modes (as in the seed's benchmark.py):
  single    one session at a time (--requests, default 5)
  scaling   each of --concurrent N[,N...] in turn (closed loop, --requests or --rounds x N)
  tuning    raise concurrency (--start, x --factor) until the SLO breaks, then bisect
  all       single, scaling, tuning

SLO (tuning): TTFB p95 <= 150 ms, zero underruns, every session OK (--slo-*). With
--input streaming the TTFB of the SLO is measured from the moment segment 0's text was
complete (the server cannot speak a sentence before it has it); with --input whole it is
from the request. Both figures are always reported.

Server CPU: pass --server-pid PID (or `auto`: the process listening on the target's port,
same machine, same user) to read /proc/PID/stat before and after each level.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys

from . import __version__
from .load import WorkerSpec
from .report import machine, plot, table
from .summary import default_raw_path, summarize_doc, write_raw, write_summary
from .runner import Options, Runner, Slo, status
from .texts import TEXT_SETS


def _levels(text: str) -> list[int]:
    try:
        levels = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N[,N...], got {text!r}") from None
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError("concurrency levels must be >= 1")
    return levels


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="orpheus-bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["single", "scaling", "tuning", "all"])
    p.add_argument("--target", default="localhost:50051", help="server host:port")
    g = p.add_argument_group("load")
    g.add_argument("--concurrent", type=_levels, default=None,
                   help="scaling levels, e.g. 8 or 1,8,32 (default 1,2,4,8,16,32)")
    g.add_argument("--requests", type=int, help="sessions per level (default: --rounds x concurrency)")
    g.add_argument("--rounds", type=int, default=2, help="sessions per concurrency slot (default 2)")
    g.add_argument("--duration", type=float, help="run each level for this many seconds instead")
    g.add_argument("--ramp", default="auto",
                   help="spread the first sessions' starts over this many seconds (default auto: "
                        "one typical session length, at most 20 s)")
    g.add_argument("--pace", choices=["playout", "none"], default="playout",
                   help="playout (default): a slot starts its next session when its listener "
                        "has heard the previous one, so concurrency = real-time listeners; "
                        "none: back to back as soon as a call ends")
    g.add_argument("--procs", type=int, default=1, help="load worker processes (default 1)")
    g.add_argument("--channels-per-proc", type=int, default=0,
                   help="gRPC connections per worker (default: one per 64 sessions)")
    g.add_argument("--warmup", type=int, default=2, help="uncounted sessions first (default 2)")
    g.add_argument("--timeout", type=float, default=600.0, help="per-call deadline, seconds")
    t = p.add_argument_group("text")
    t.add_argument("--text-set", choices=sorted(TEXT_SETS), default="conversational")
    t.add_argument("--texts", type=int, default=64, help="distinct texts, used round robin")
    t.add_argument("--text-seed", type=int, default=0)
    t.add_argument("--input", choices=["whole", "streaming"], default="whole",
                   help="whole text in one Synthesize call, or word fragments over "
                        "StreamingSynthesize at --input-rate")
    t.add_argument("--input-rate", type=float, default=15.0,
                   help="words/s for --input streaming (default 15: ~20 LLM tokens/s, a slow "
                        "hosted LLM; speech is ~2.5 words/s)")
    t.add_argument("--voice", default="tara")
    t.add_argument("--word-timestamps", action="store_true",
                   help="every session asks for word timings (docs/api.md)")
    t.add_argument("--encoding", choices=["pcm16", "mulaw"], default="pcm16")
    t.add_argument("--sample-rate", type=int, default=0, help="0: 24000 (pcm16) / 8000 (mulaw)")
    t.add_argument("--seed", type=int, default=-1,
                   help="sampling seed base (session k: seed + 1000 k) so runs repeat; -1 (the "
                        "default): none, as a voice agent sends none (issue 33: a seeded load "
                        "takes the batch-invariant path and measured another server)")
    t.add_argument("--seeded", action="store_true",
                   help="seed every session (base 1 unless --seed gives one)")
    m = p.add_argument_group("metrics and SLO")
    m.add_argument("--jitter-ms", type=float, default=100.0, help="playout jitter allowance")
    m.add_argument("--server-pid", default=None, help="server pid for /proc CPU, or 'auto'")
    m.add_argument("--sim-profile", default=None,
                   help="the server's sim profile: report modelled GPU TTFB and server-added TTFB")
    m.add_argument("--sim-stats", metavar="FILE", default=os.environ.get("ORPHEUS_SIM_STATS_FILE"),
                   help="the sim server's stats file (the server writes it when started with "
                        "ORPHEUS_SIM_STATS_FILE set; default: that variable here): adds host-bound "
                        "steps and the step-time distribution to each level")
    m.add_argument("--slo-ttfb-ms", type=float, default=150.0)
    m.add_argument("--slo-percentile", type=float, default=95.0)
    m.add_argument("--slo-underruns", type=int, default=0, help="max underrun events per level")
    m.add_argument("--slo-success", type=float, default=1.0, help="min success rate")
    m.add_argument("--slo-metric", choices=["auto", "ttfb", "ttfb_text"], default="auto",
                   help="auto: ttfb_text for streaming input, ttfb for whole")
    u = p.add_argument_group("tuning")
    u.add_argument("--start", type=int, default=8)
    u.add_argument("--factor", type=float, default=2.0)
    u.add_argument("--max-concurrency", type=int, default=1024)
    u.add_argument("--resolution", type=float, default=0.1,
                   help="bisect until the gap is this fraction of the passing level")
    o = p.add_argument_group("output")
    o.add_argument("--output", help="summary JSON, the file to commit (rewritten after every "
                                    "level): settings, per level the table row, percentiles and "
                                    "host figures; no per-session records")
    o.add_argument("--raw", metavar="PATH",
                   help="the raw JSON with every session's record (default with --output: "
                        "$ORPHEUS_BENCH_RAW/<output's folder>/<name>.raw.json, else "
                        "~/.cache/orpheus-bench/raw/...: outside the repository)")
    o.add_argument("--raw-gzip", action="store_true", help="gzip the raw JSON (.raw.json.gz)")
    o.add_argument("--no-raw", action="store_true", help="write no raw JSON")
    o.add_argument("--plot", metavar="DIR", help="write ttfb.png and underruns.png here")
    o.add_argument("--traces", action="store_true", help="include raw arrival traces in the JSON")
    o.add_argument("--label", default="", help="free text stored in the JSON meta")
    return p


def _seed_base(args) -> int | None:
    """The sessions' seed base, None when they are unseeded (the default)."""
    if args.seed >= 0:
        return args.seed
    return 1 if args.seeded else None


def _server_pid(arg: str | None, target: str) -> int | None:
    if arg is None:
        return None
    if arg == "auto":
        from .procstat import find_listener_pid
        port = int(target.rsplit(":", 1)[1])
        pid = find_listener_pid(port)
        if pid is None:
            print(f"orpheus-bench: no process of this user listens on port {port}; "
                  f"server CPU not measured", file=sys.stderr)
        return pid
    return int(arg)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    info = status(args.target)
    if info is None:
        print(f"orpheus-bench: no orpheus-svc answers GetStatus at {args.target}", file=sys.stderr)
        return 2
    if not info.get("serving"):
        print(f"orpheus-bench: the server at {args.target} is not serving yet", file=sys.stderr)
        return 2
    metric = args.slo_metric
    if metric == "auto":
        metric = "ttfb_text" if args.input == "streaming" else "ttfb"
    slo = Slo(args.slo_ttfb_ms, args.slo_percentile, args.slo_underruns, args.slo_success,
              metric + "_ms")
    base = WorkerSpec(worker=0, procs=args.procs, target=args.target, concurrency=1,
                      requests=1, duration_s=None, ramp_s=0.0, text_set=args.text_set,
                      text_count=args.texts, text_seed=args.text_seed, input=args.input,
                      input_rate=args.input_rate, voice=args.voice, encoding=args.encoding,
                      sample_rate=args.sample_rate, seed=_seed_base(args),
                      timeout_s=args.timeout, pace=args.pace,
                      word_timestamps=args.word_timestamps)
    pid = _server_pid(args.server_pid, args.target)
    ramp = args.ramp if args.ramp == "auto" else float(args.ramp)
    opts = Options(target=args.target, base=base, jitter_s=args.jitter_ms / 1000, server_pid=pid,
                   sim_profile=args.sim_profile, sim_stats=args.sim_stats, slo=slo, keep_traces=args.traces, ramp=ramp,
                   channels_per_proc=args.channels_per_proc)
    runner = Runner(opts)
    raw_path = _raw_path(args)
    doc = {"tool": "orpheus-bench", "version": __version__,
           "meta": {"started_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                    "argv": sys.argv if argv is None else ["orpheus-bench", *argv],
                    "label": args.label, "target": args.target, "server_status": info,
                    "server_pid": pid, "machine": machine(), "mode": args.mode,
                    "text_set": args.text_set, "input": args.input,
                    "input_rate_words_per_s": args.input_rate if args.input == "streaming" else None,
                    "jitter_ms": args.jitter_ms, "seed": _seed_base(args),
                    "seeded": _seed_base(args) is not None, "procs": args.procs,
                    "pace": args.pace,
                    "slo": slo.__dict__,
                    "simulated_gpu": info.get("backend") == "sim",
                    "sim_profile": args.sim_profile,
                    "sim_stats_file": args.sim_stats},
           "runs": []}
    results: list[dict] = doc["runs"]

    def save(r: dict | None = None) -> None:
        if r is not None and not any(x is r for x in results):
            results.append(r)
        if raw_path is not None:
            write_raw(raw_path, doc)
        if args.output:
            raw = {"path": str(raw_path)} if raw_path is not None else None
            write_summary(args.output, summarize_doc(doc, raw=raw))

    runner.warmup(args.warmup)
    if args.mode in ("single", "all"):
        save(runner.level(1, args.requests or 5, "single"))
    if args.mode in ("scaling", "all"):
        levels = args.concurrent or [1, 2, 4, 8, 16, 32]
        runner.scaling(levels, args.requests, args.rounds, args.duration, on_result=save)
    if args.mode in ("tuning", "all"):
        tuning = runner.tuning(args.start, args.factor, args.max_concurrency, args.resolution,
                               args.requests, args.rounds, args.duration, on_result=save)
        doc["tuning"] = {k: v for k, v in tuning.items() if k != "results"}
        save()
    table(results)
    if "tuning" in doc:
        t = doc["tuning"]
        print(f"tuning: largest concurrency meeting the SLO ({slo.metric} p{slo.percentile:g} <= "
              f"{slo.ttfb_ms:g} ms, underruns <= {slo.max_underruns}, success >= "
              f"{slo.min_success:g}): {t['max_passing_concurrency']}"
              f" (first failure: {t['first_failing_concurrency']})", file=sys.stderr)
    if args.plot:
        title = f"{args.text_set}, {args.input} input, {info.get('backend')} backend"
        files = plot(results, args.plot, title, args.slo_ttfb_ms)
        doc["meta"]["plots"] = files
        save()
        print("plots: " + ", ".join(files), file=sys.stderr)
    if args.output:
        print(f"results: {os.path.abspath(args.output)}", file=sys.stderr)
    if raw_path is not None:
        print(f"raw results: {raw_path}", file=sys.stderr)
    return 0


def _raw_path(args: argparse.Namespace):
    """Where the raw document goes: --raw, else (with --output) under the raw directory,
    which is outside the repository unless $ORPHEUS_BENCH_RAW says otherwise."""
    if args.no_raw:
        return None
    if args.raw:
        raw = args.raw
        if args.raw_gzip and not raw.endswith(".gz"):
            raw += ".gz"
        return raw
    if args.output:
        return default_raw_path(args.output, gz=args.raw_gzip)
    return None


if __name__ == "__main__":
    sys.exit(main())
