"""One load level end to end, and the modes built from levels (single, scaling, tuning).

A level: snapshot the server (GetStatus counters, /proc CPU of --server-pid), run the
workers (in this process for --procs 1, else spawned processes that start together on
one monotonic instant), snapshot again, compute metrics from the traces.

Server CPU per audio second = server CPU seconds during the level / audio seconds the
clients received in it. Every session of a level starts and ends inside it (closed loop,
the level waits for the last one), so both figures cover the same work.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from dataclasses import dataclass, replace
from typing import Callable

import grpc
from orpheus_tts_client.proto.v1 import tts_pb2, tts_pb2_grpc

from . import procstat, simstats
from .load import WorkerSpec, run_worker, spec_dict, worker_process
from .metrics import SessionTrace, aggregate, session_metrics, slo_check


@dataclass(frozen=True)
class Slo:
    ttfb_ms: float = 150.0
    percentile: float = 95
    max_underruns: int = 0
    min_success: float = 1.0
    metric: str = "ttfb_ms"  # or "ttfb_text_ms"

    def check(self, agg: dict) -> dict:
        return slo_check(agg, ttfb_ms=self.ttfb_ms, percentile_q=self.percentile,
                         max_underruns=self.max_underruns, min_success=self.min_success,
                         metric=self.metric)


@dataclass
class Options:
    target: str
    base: WorkerSpec               # text set, input style... (worker/concurrency filled per level)
    jitter_s: float = 0.1
    server_pid: int | None = None
    sim_profile: str | None = None
    sim_stats: str | None = None   # the sim server's ORPHEUS_SIM_STATS_FILE (GPU or host?)
    slo: Slo = Slo()
    keep_traces: bool = False
    ramp: str | float = "auto"     # seconds, or "auto": one typical session length
    channels_per_proc: int = 0     # 0: one per 64 concurrent sessions of the worker


def status(target: str, timeout: float = 5.0) -> dict | None:
    """GetStatus as a dict, or None if the server does not answer."""
    try:
        with grpc.insecure_channel(target) as ch:
            msg = tts_pb2_grpc.TTSServiceStub(ch).GetStatus(tts_pb2.GetStatusRequest(),
                                                             timeout=timeout)
    except grpc.RpcError:
        return None
    return {f.name: getattr(msg, f.name) for f in msg.DESCRIPTOR.fields}


def _loadavg() -> list[float] | None:
    try:
        return [float(x) for x in open("/proc/loadavg").read().split()[:3]]
    except OSError:
        return None


def typical_session_s(text_set: str) -> float:
    from .texts import TEXT_SETS
    return TEXT_SETS[text_set][0] / 15.0  # ~15 chars/s of speech


def auto_ramp_s(text_set: str) -> float:
    """One typical session length (a closed loop's steady-state spacing), at most 20 s."""
    return min(typical_session_s(text_set), 20.0)


class Runner:
    def __init__(self, opts: Options, log: Callable[[str], None] | None = None) -> None:
        self.opts = opts
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))

    # -- one level --------------------------------------------------------------------------

    def level(self, concurrency: int, requests: int | None, label: str,
              duration_s: float | None = None) -> dict:
        o = self.opts
        procs = max(1, min(o.base.procs, concurrency))
        ramp = auto_ramp_s(o.base.text_set) if o.ramp == "auto" else float(o.ramp)
        if concurrency == 1:
            ramp = 0.0
        per_proc = -(-concurrency // procs)
        channels = o.channels_per_proc or max(1, -(-per_proc // 64))
        spec = replace(o.base, procs=procs, concurrency=concurrency, requests=requests,
                       duration_s=duration_s, ramp_s=ramp, channels=channels,
                       jitter_s=o.jitter_s)
        self.log(f"[{label}] concurrency {concurrency}, "
                 f"{requests if requests is not None else f'{duration_s:.0f} s of'} sessions, "
                 f"{procs} load process(es), ramp {ramp:.1f} s")
        sim0 = simstats.read(o.sim_stats)
        st0, cpu0, m0 = status(o.target), self._cpu(), procstat.machine_ticks()
        t0 = time.monotonic()
        results = self._run_workers(spec, procs)
        wall = time.monotonic() - t0
        st1, cpu1, m1 = status(o.target), self._cpu(), procstat.machine_ticks()
        sim1 = simstats.read(o.sim_stats, not_before=time.time())
        out = self._result(label, spec, results, wall, st0, st1, cpu0, cpu1)
        sim = simstats.delta(sim0, sim1)
        if sim is not None:
            out["sim"] = sim  # GPU or host: host_bound_steps, host_excess_s, step_ms
        # Everything else on this machine competes for the same cores: say how much there was.
        busy = procstat.machine_busy_cores(m0, m1)
        other = None
        if busy is not None and "cpu_util" in out["server"]:
            load_util = out["load"]["cpu_s"] / wall if wall > 0 else 0.0
            other = max(0.0, busy - out["server"]["cpu_s"] / wall - load_util)
        out["machine"] = {"busy_cores": busy, "other_busy_cores": other,
                          "loadavg": _loadavg()}
        return out

    def _cpu(self):
        if self.opts.server_pid is None:
            return None
        try:
            return procstat.sample(self.opts.server_pid)
        except OSError:
            return None

    def _run_workers(self, spec: WorkerSpec, procs: int) -> list[dict]:
        if procs == 1:
            return [run_worker(replace(spec, worker=0, start_at=time.monotonic() + 0.05))]
        ctx = multiprocessing.get_context("spawn")
        pipes, children = [], []
        for w in range(procs):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=worker_process, args=(spec_dict(replace(spec, worker=w)), child),
                            daemon=True)
            p.start()
            pipes.append(parent)
            children.append(p)
        for c in pipes:  # all imported and connected: start together
            msg = c.recv()
            if "error" in msg:
                raise RuntimeError(f"load worker failed to start: {msg['error']}")
        start_at = time.monotonic() + 0.05
        for c in pipes:
            c.send(start_at)
        results = []
        for c in pipes:
            msg = c.recv()
            if "error" in msg:
                raise RuntimeError(f"load worker failed: {msg['error']}")
            results.append(msg)
        for p in children:
            p.join(10)
        return results

    def _result(self, label, spec, results, wall, st0, st1, cpu0, cpu1) -> dict:
        o = self.opts
        traces = [SessionTrace.from_dict(t) for r in results for t in r["traces"]]
        traces.sort(key=lambda t: t.index)
        sm = [session_metrics(t, o.jitter_s) for t in traces]
        starts = [t.t_start for t in traces]
        ends = [t.t_end for t in traces if t.t_end is not None]
        span = (max(ends) - min(starts)) if traces and ends else wall
        out = {"label": label, "concurrency": spec.concurrency, "requests": len(traces),
               "input": spec.input, "text_set": spec.text_set,
               "seeded": spec.seed is not None, **aggregate(sm, span)}
        out["load"] = self._load_figures(results, spec)
        out["server"] = self._server_figures(st0, st1, cpu0, cpu1, span, out["audio_s_total"])
        model = self._model_ttfb(out)
        if model is not None:
            out["model_ttfb_ms"] = model
            t = out["ttfb_text_ms" if spec.input == "streaming" else "ttfb_ms"]
            out["server_added_ttfb_ms"] = {k: (None if t.get(k) is None else t[k] - model)
                                           for k in ("p50", "p95", "p99")}
        out["slo"] = o.slo.check(out)
        errors = sorted({f"{t.code}: {t.error}" for t in traces if not t.ok})
        out["errors"] = errors[:10]
        out["sessions_detail"] = [
            {"i": m.index, "code": m.code,
             "ttfb_ms": None if m.ttfb_s is None else round(m.ttfb_s * 1000, 2),
             "ttfb_text_ms": None if m.ttfb_text_s is None else round(m.ttfb_text_s * 1000, 2),
             "audio_s": round(m.audio_s, 3), "underruns": m.underruns,
             "stall_ms": round(m.stall_s * 1000, 1), "rtf": None if m.rtf is None else round(m.rtf, 4),
             "tokens": m.tokens} for m in sm]
        if o.keep_traces:
            out["traces"] = [t.to_dict() for t in traces]
        return out

    def _load_figures(self, results: list[dict], spec: WorkerSpec) -> dict:
        utils = [r["cpu_s"] / r["wall_s"] if r["wall_s"] > 0 else 0.0 for r in results]
        lag_p99 = max((r["loop_lag_ms"].get("p99") or 0.0) for r in results)
        try:
            cores = len(os.sched_getaffinity(0))
        except AttributeError:
            cores = os.cpu_count() or 1
        saturated = max(utils) > 0.9 or sum(utils) > 0.9 * cores or lag_p99 > 20
        return {"procs": len(results), "channels_per_proc": spec.channels,
                "cpu_s": sum(r["cpu_s"] for r in results),
                "cpu_util_per_proc": [round(u, 3) for u in utils],
                "cores_available": cores,
                "loop_lag_ms_p99_max": lag_p99,
                "loop_lag_ms": [r["loop_lag_ms"] for r in results],
                "maybe_saturated": saturated}

    @staticmethod
    def _server_figures(st0, st1, cpu0, cpu1, span, audio_s) -> dict:
        out: dict = {}
        if st0 and st1:
            dt = {k: st1[k] - st0[k] for k in ("tokens_total", "steps_total", "rejected_total",
                                                "generations_total", "audio_seconds_total")
                  if k in st0}
            out.update({
                "backend": st1.get("backend"), "model": st1.get("model"),
                "total_slots": st1.get("total_slots"), "max_batch_size": st1.get("max_batch_size"),
                "tokens": dt.get("tokens_total"), "steps": dt.get("steps_total"),
                "generations": dt.get("generations_total"),
                "rejected": dt.get("rejected_total"),
                "tokens_per_s": dt.get("tokens_total", 0) / span if span > 0 else None,
                "steps_per_s": dt.get("steps_total", 0) / span if span > 0 else None,
                "mean_batch": (dt["tokens_total"] / dt["steps_total"]
                               if dt.get("steps_total") else None),
            })
            # A status field for process CPU, if the server grows one, is used when no pid is.
            if cpu0 is None and "process_cpu_seconds" in st0:
                cpu = st1["process_cpu_seconds"] - st0["process_cpu_seconds"]
                out.update(cpu_s=cpu, cpu_source="status")
        if cpu0 is not None and cpu1 is not None:
            d = procstat.delta(cpu0, cpu1)
            out.update(cpu_s=d["cpu_s"], cpu_source=f"/proc/{cpu0.pid}", threads=d["threads"])
        if "cpu_s" in out:
            out["cpu_util"] = out["cpu_s"] / span if span > 0 else None
            out["cpu_s_per_audio_s"] = out["cpu_s"] / audio_s if audio_s > 0 else None
        return out

    def _model_ttfb(self, res: dict) -> float | None:
        """Modelled GPU critical path to first audio (sim profiles only; see sim_profiles)."""
        if not self.opts.sim_profile:
            return None
        from orpheus_svc.engine.sim.profiles import get_profile

        p = get_profile(self.opts.sim_profile)
        batch = res["server"].get("mean_batch") or res["concurrency"]
        gens = res["server"].get("generations") or res["requests"] or 1
        per_gen = (res["server"].get("tokens") or res["tokens_total"]) / max(gens, 1)
        prompt = 60
        return p.model_ttfb_seconds(round(batch), prompt + per_gen / 2, prompt) * 1000

    # -- modes ------------------------------------------------------------------------------

    def warmup(self, n: int) -> None:
        if n > 0:
            self.log(f"[warm-up] {n} session(s), not counted")
            self.level(1, n, "warm-up")

    def scaling(self, levels: list[int], requests: int | None, rounds: int,
                duration_s: float | None, label: str = "scaling",
                on_result: Callable[[dict], None] | None = None) -> list[dict]:
        out = []
        for c in levels:
            r = self.level(c, self._requests(c, requests, rounds, duration_s), label, duration_s)
            out.append(r)
            if on_result:
                on_result(r)
        return out

    def tuning(self, start: int, factor: float, max_c: int, resolution: float,
               requests: int | None, rounds: int, duration_s: float | None,
               on_result: Callable[[dict], None] | None = None) -> dict:
        """Raise concurrency until the SLO breaks, then bisect between the last pass and
        the first failure down to `resolution` (a fraction of the passing level)."""
        probes: list[dict] = []

        def probe(c: int) -> bool:
            r = self.level(c, self._requests(c, requests, rounds, duration_s), "tuning", duration_s)
            probes.append(r)
            if on_result:
                on_result(r)
            verdict = "PASS" if r["slo"]["pass"] else "FAIL " + "; ".join(r["slo"]["failures"])
            self.log(f"[tuning] concurrency {c}: {verdict}")
            return r["slo"]["pass"]

        passing, failing, c = None, None, max(1, start)
        while c <= max_c:
            if probe(c):
                passing = c
                c = max(c + 1, int(round(c * factor)))
            else:
                failing = c
                break
        if passing is not None and failing is not None:
            while failing - passing > max(1, int(passing * resolution)):
                mid = (passing + failing) // 2
                if probe(mid):
                    passing = mid
                else:
                    failing = mid
        return {"max_passing_concurrency": passing, "first_failing_concurrency": failing,
                "slo": self.opts.slo.__dict__, "probes": [p["concurrency"] for p in probes],
                "results": probes}

    @staticmethod
    def _requests(c: int, requests: int | None, rounds: int, duration_s: float | None):
        if duration_s is not None:
            return None
        return requests if requests is not None else max(1, rounds * c)
