"""Host CPU of the engine thread and the flusher per step, without gRPC or sleeping (dev tool).

    python -m orpheus_bench.hostprofile --gens 256 --steps 2000 [--cprofile engine|flusher]

Drives a real EngineLoop (its _step, on this thread) over the sim backend with sleeping
switched off, feeding its frames to a real Flusher with the SimCodec (no sleeping either),
with `--gens` generations always live (a finished one is replaced at once, like a server
at steady state). Prints CPU microseconds per step and per row for the engine and the
flusher, and with --cprofile the top functions of one of them. This is the server's own
work per token that an H100-paced run has to fit between steps.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="orpheus-bench-hostprofile")
    p.add_argument("--gens", type=int, default=256)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--expected-frames", type=int, default=46, help="segment length (~3.9 s)")
    p.add_argument("--cprofile", choices=["engine", "flusher"], default=None)
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args(argv)

    from orpheus_svc.audio.flusher import Flusher
    from orpheus_svc.audio.settings import FlusherSettings
    from orpheus_svc.core.prompt import build_prompt
    from orpheus_svc.core.request import GenerationRequest
    from orpheus_svc.core.scheduler_settings import SchedulerSettings
    from orpheus_svc.engine.loop import EngineLoop
    from orpheus_svc.engine.sim.backend import SimBackend
    from orpheus_svc.engine.sim.codec import SimCodec
    from orpheus_svc.engine.sim.encode import sim_encode
    from orpheus_svc.engine.sim.profiles import get_profile

    profile = get_profile("h100-fp8")
    backend = SimBackend(profile, num_slots=args.gens * 2, max_seq_len=4096, sleep=lambda s: None)
    codec = SimCodec(profile, sleep=lambda s: None)
    audio_events = [0]
    finished: list[int] = []

    def audio_sink(evs):  # a generation ends with its final audio event (its Finish)
        audio_events[0] += len(evs)
        finished.extend(1 for e in evs if e.final)

    flusher = Flusher(codec, FlusherSettings(), audio_sink)

    def sink(batch):  # Rejected
        pass

    core = EngineLoop(backend, flusher, sink,
                      settings=SchedulerSettings(max_batch_size=args.gens * 2,
                                                 max_waiting=args.gens * 2), seed=1)
    text = "Sure, I checked the details this morning and everything looks fine."
    prompt = tuple(build_prompt(sim_encode, "tara", text))
    n_sub = [0]

    def submit(n):
        for _ in range(n):
            n_sub[0] += 1
            core.submit(GenerationRequest(session_id=f"s{n_sub[0]}", segment_index=0,
                                          prompt_ids=prompt, max_tokens=2000,
                                          expected_frames=args.expected_frames))

    from orpheus_svc.core.events import EventBatch
    events = EventBatch(sink)
    submit(args.gens)
    prof = cProfile.Profile() if args.cprofile else None
    eng_cpu = fl_cpu = 0.0
    rows = 0
    for _ in range(args.steps):
        t = time.thread_time()
        if prof is not None and args.cprofile == "engine":
            prof.enable()
        core._drain(events, block=False)
        before = backend.counters["rows"]
        core._step(events)
        core._stats = core._scheduler.stats()
        events.flush()
        if prof is not None and args.cprofile == "engine":
            prof.disable()
        eng_cpu += time.thread_time() - t
        rows += backend.counters["rows"] - before
        t = time.thread_time()
        if prof is not None and args.cprofile == "flusher":
            prof.enable()
        flusher.run_once()
        if prof is not None and args.cprofile == "flusher":
            prof.disable()
        fl_cpu += time.thread_time() - t
        done, finished[:] = len(finished), []
        submit(done)
    steps = args.steps
    print(f"gens live {args.gens}, steps {steps}, mean rows/step {rows / steps:.1f}, "
          f"generations finished {n_sub[0] - args.gens}")
    print(f"engine  : {eng_cpu / steps * 1e6:8.1f} us/step  {eng_cpu / rows * 1e6:6.2f} us/row")
    print(f"flusher : {fl_cpu / steps * 1e6:8.1f} us/step  {fl_cpu / rows * 1e6:6.2f} us/row "
          f"({audio_events[0]} audio events)")
    per_rt_session = (eng_cpu + fl_cpu) / rows * 82.03
    print(f"engine+flusher CPU per real-time session: {per_rt_session * 100:.2f}% of a core "
          f"-> {1 / per_rt_session:.0f} sessions per core before gRPC and encoding")
    if prof is not None:
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(args.top)
        print(s.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
