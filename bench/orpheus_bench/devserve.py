"""Run `orpheus-svc serve` with the sim backend before runtime.py wires it (dev use only).

    python -m orpheus_bench.devserve --sim-profile h100-fp8 --port 50062 \
        --set engine.max_sessions=512 --set engine.max_batch_size=512 [--sim-stats FILE]

Patches build_runtime so that the torch path builds SimBackend + sim_encode and the SNAC
load returns SimCodec; everything else (EngineCore, scheduler, flusher, servicer) is the
real server. --sim-stats appends the backend's counters as a JSON line every 5 s (host-bound
steps: the steps where the server's own Python was slower than the modelled GPU step).
Delete this file once `orpheus-svc serve --backend sim` exists.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import threading
import time


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="orpheus-bench-devserve")
    p.add_argument("--port", type=int, default=50062)
    p.add_argument("--sim-profile", default="h100-fp8")
    p.add_argument("--no-sim-codec", action="store_true", help="decode with the (demo) SNAC")
    p.add_argument("--profile", default=None, help="conversational | longform")
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--sim-stats", help="append sim backend counters here every 5 s (JSON lines)")
    p.add_argument("--policy", choices=["deadline", "fifo", "round_robin"], default="deadline",
                   help="scheduler order (until SchedulerSettings.policy exists): deadline = "
                        "ours (aging, TTFB, least slack); fifo = arrival order; round_robin = "
                        "longest-waiting first")
    p.add_argument("--max-ahead", type=float, default=0.0,
                   help="leave out of a step every generation whose listener has more than "
                        "this many seconds buffered (0: off; the proposed "
                        "SchedulerSettings.max_ahead_s)")
    p.add_argument("--gc-log", action="store_true",
                   help="log every garbage-collector pass longer than 5 ms (to stderr)")
    args = p.parse_args(argv)

    import orpheus_svc.runtime as rt
    import orpheus_svc.server.app as app
    from orpheus_svc.config import load_config
    from orpheus_svc.engine.sim import build_sim_backend

    overrides = dict(item.split("=", 1) for item in args.set)
    overrides.update({"server.port": args.port, "engine.backend": "sim",
                      "engine.sim_profile": args.sim_profile,
                      "engine.sim_codec": not args.no_sim_codec})
    if args.profile:
        overrides["profile"] = args.profile
    config = load_config(None, overrides=overrides)
    built: dict = {}

    def sim_backend(cfg, model_ref, device, dtype):
        backend, encode, codec = build_sim_backend(cfg)
        built.update(backend=backend, codec=codec)
        return backend, encode

    real_load_snac = rt.load_snac

    def load_snac(ref, device="cpu", dtype=None, **kw):
        return built["codec"] if built.get("codec") is not None else real_load_snac(ref, device=device)

    original = rt.build_runtime

    def build_runtime(cfg, router=None, **kw):
        torch_cfg = dataclasses.replace(cfg, engine=dataclasses.replace(cfg.engine, backend="torch"))
        runtime = original(torch_cfg, router, **kw)
        runtime.config = cfg
        return runtime

    _patch_session_run()
    rt._torch_backend = sim_backend
    rt.load_snac = load_snac
    app.build_runtime = build_runtime

    if args.gc_log:
        _log_gc_pauses()
    if args.policy != "deadline":
        _patch_policy(args.policy)
    if args.max_ahead > 0:
        _patch_max_ahead(args.max_ahead)
    if args.sim_stats:
        def report() -> None:
            with open(args.sim_stats, "a") as f:
                while True:
                    time.sleep(5)
                    if "backend" in built:
                        stats = built["backend"].stats()
                        codec = built.get("codec")
                        if codec is not None:
                            stats.update(codec_calls=codec.num_calls, codec_frames=codec.num_frames,
                                         codec_modelled_s=codec.modelled_s)
                        stats["slow_steps"] = [(round(t, 3), round(o * 1000, 1), n)
                                               for t, o, n in built["backend"].slow_steps[-10:]]
                        f.write(json.dumps({"t": time.time(), "mono": time.monotonic(), **stats}) + "\n")
                        f.flush()
        threading.Thread(target=report, daemon=True, name="sim-stats").start()
    return app.serve_main(config)


def _patch_policy(policy: str) -> None:
    """The baselines of issue 5's scheduling comparison, as Scheduler._priority variants
    (the proposed SchedulerSettings.policy does the same inside the scheduler)."""
    from orpheus_svc.core.scheduler import Scheduler

    if policy == "fifo":
        def priority(self, gen, now):
            return (0, gen.arrival)
    else:  # round_robin: whoever has waited the most steps goes first, then arrival
        def priority(self, gen, now):
            return (0, -gen.steps_waited, gen.arrival)
    Scheduler._priority = priority


def _patch_max_ahead(limit_s: float) -> None:
    """Scheduler.schedule with a playout horizon: a generation in the deadline class whose
    slack exceeds `limit_s` sits this step out (it does not age either). Same code as the
    scheduler's schedule() otherwise."""
    from orpheus_svc.core.scheduler import Scheduler, StepPlan

    def schedule(self, now):
        self._step += 1
        plan = StepPlan(step=self._step)
        for gen in [g for g in self._running.values() if g.cancelled]:
            self._finish(gen, "cancelled", now)
            plan.released.append(gen)
        self._admit(plan, now)
        self._forget_idle_sessions(now)
        keyed = [(self._priority(g, now), g) for g in self._running.values()]
        keyed = [(k, g) for k, g in keyed if not (k[0] == 2 and k[1] > limit_s)]
        keyed.sort(key=lambda kg: kg[0])
        prefill_budget = self.settings.max_prefill_tokens
        for _, gen in keyed:
            if len(plan.prefill) + len(plan.decode) >= self.settings.max_batch_size:
                gen.steps_waited += 1
                continue
            if gen.needs_prefill:
                if plan.prefill and gen.num_prompt_tokens > prefill_budget:
                    gen.steps_waited += 1
                    continue
                prefill_budget -= gen.num_prompt_tokens
                plan.prefill.append(gen)
            else:
                plan.decode.append(gen)
            gen.steps_waited = 0
        return plan

    Scheduler.schedule = schedule


def _log_gc_pauses(threshold_s: float = 0.005) -> None:
    import gc

    started: dict = {}

    def cb(phase, info):
        if phase == "start":
            started["t"] = time.perf_counter()
        elif "t" in started:
            took = time.perf_counter() - started.pop("t")
            if took >= threshold_s:
                print(json.dumps({"event": "gc pause", "generation": info["generation"],
                                  "ms": round(took * 1000, 1), "collected": info["collected"],
                                  "objects": len(gc.get_objects(info["generation"]))}),
                      file=sys.stderr, flush=True)

    gc.callbacks.append(cb)


def _patch_session_run() -> None:
    """Work around a server bug until it is fixed in server/session.py: when the events
    of one inbox item let run() deliver the last in-flight segments, it went back to
    waiting on the inbox without submitting the next segments (_submit_ready runs only
    before _deliverable), so a session whose in-flight segments all finished before its
    loop woke hung until its deadline. Same loop, with a resubmit after a delivery."""
    import asyncio

    from orpheus_svc.server import session as sess

    async def run(self, inputs):
        loop = asyncio.get_running_loop()
        reader = asyncio.create_task(self._read(inputs))
        try:
            while True:
                self._submit_ready(loop)
                outs = self._deliverable()
                for out in outs:
                    yield out
                if self._input_done and self._delivered == len(self._segments):
                    break
                if outs:
                    continue  # delivery made room in flight: submit before waiting
                item = await self._inbox.get()
                if self._error is not None:
                    raise self._error
                if item is not sess._WAKE:
                    self._on_engine_event(item)
            yield self._summary()
        finally:
            reader.cancel()
            for seg in self._segments:
                if seg.gen_id is not None:
                    self.runtime.router.unregister(seg.gen_id)
                    if seg.index >= self._delivered:
                        self.runtime.core.cancel(seg.gen_id)

    sess.StreamSession.run = run


if __name__ == "__main__":
    sys.exit(main())
