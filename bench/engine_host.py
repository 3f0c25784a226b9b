"""The engine thread's host cost per row and step, with the GPU's time taken out (issue 16).

Drives the real EngineLoop step (scheduler, sim backend, engine -> flusher hand-off) in
this thread with the sim backend's modelled sleep turned into a no-op, so what is timed is
only the Python the engine thread runs per step. `--sessions` generations are kept live
(a finished one is replaced at once, as the `--pace none` load does), with conversational
lengths (the sim's length model, about 4 s per segment). The frames go to a sink that
copies and validates them like Flusher.push_many and keeps nothing else.

    PYTHONPATH=bench python bench/engine_host.py [--sessions 512] [--steps 3000]
    PYTHONPATH=bench python bench/engine_host.py --backend graph --sessions 64,256,512

`--backend graph` drives the graph backend instead (a tiny Llama on the CPU, no CUDA
graphs) with its step's device work replaced by a stub that writes a legal audio id per
row: what is timed is the engine thread's host path of a graph step (the scheduler, rows.py,
packing the staging, the copies, collecting), at the row counts given. To compare code
versions, run this file against each (PYTHONPATH=<checkout>:bench) in the same window.

Prints per-step and per-row host time (CPU time of this thread: time.thread_time) and the
CPU-seconds per audio second it implies. A figure from one machine: compare code versions by
running both in the same window (BENCHMARKS.md says which runs were alternated).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from orpheus_svc.core.events import EventBatch
from orpheus_svc.core.request import GenerationRequest, SamplingParams
from orpheus_svc.core.scheduler_settings import SchedulerSettings
from orpheus_svc.core.tokens import FRAME_SECONDS, FRAME_TOKENS
from orpheus_svc.engine.loop import EngineLoop
from orpheus_svc.engine.sim.backend import SimBackend
from orpheus_svc.engine.sim.profiles import get_profile

PROMPT_TOKENS = 48  # a conversational sentence with the voice prefix and control tokens
EXPECTED_FRAMES = 47  # about 4 s of audio


class CopySink:
    """Does what Flusher.push does with the frames (copy, shape and range check) and counts
    them; no decode."""

    def __init__(self) -> None:
        self.frames = 0

    def push(self, gen_id, frames, final, playout=None, finish=None) -> None:
        """The hand-off before push_many (one call per generation): so this tool can time
        code from before it, in the same window."""
        self.push_many([(gen_id, frames)])

    def push_many(self, pushes) -> None:
        codes = np.concatenate([np.asarray(p[1], dtype=np.int64).reshape(-1, FRAME_TOKENS)
                                for p in pushes])
        if codes.size:
            assert codes.ndim == 2 and codes.shape[1] == FRAME_TOKENS
            assert codes.min() >= 0 and codes.max() < 4096
        self.frames += len(codes)

    def drop(self, gen_id, finish=None) -> None:
        pass


def _request(i: int, max_tokens: int = 1200) -> GenerationRequest:
    prompt = tuple(range(128000, 128000 + PROMPT_TOKENS))
    return GenerationRequest(session_id=f"s{i}", segment_index=0, prompt_ids=prompt,
                             max_tokens=max_tokens, sampling=SamplingParams(seed=i),
                             expected_frames=EXPECTED_FRAMES)


def _graph_backend(sessions: int):
    """The graph backend on a tiny Llama (CPU), its device step a stub (module docstring)."""
    import torch

    from orpheus_svc.core.tokens import AUDIO_BASE, CODES_PER_POSITION
    from orpheus_svc.engine.graph.backend import GraphBackend
    from orpheus_svc.engine.graph.rows import INPUT
    from orpheus_svc.engine.model.llama import SlotLlama
    from orpheus_svc.models.demo import demo_spec, random_state_dict

    spec = demo_spec()
    model = SlotLlama(spec, random_state_dict(spec, 0, dtype=torch.float32), num_slots=sessions,
                      max_seq_len=GRAPH_SEQ, dtype=torch.float32, spare_slots=1)
    backend = GraphBackend(model, sessions, graphs=False, prefill_rows=256)  # the default
    runner = backend.runner

    def stub(bucket: int, invariant: bool = False) -> None:
        ints = runner.inputs(bucket)[0] if hasattr(runner, "inputs") else runner.ints[:, :bucket]
        runner.out[:bucket] = AUDIO_BASE + ints[INPUT["fpos"]] * CODES_PER_POSITION + 1

    runner._run = stub
    backend.counters = {"rows": 0}  # decode rows and new prompts, as the sim counts them
    launch = backend.launch

    def counted(plan):
        backend.counters["rows"] += len(plan.decode) + len(plan.prefill)
        return launch(plan)

    backend.launch = counted
    return backend


GRAPH_SEQ = 512  # the graph bench's slot: a prompt and max_tokens fit


def run(sessions: int, steps: int, warmup: int, profile: str, backend_name: str = "sim") -> dict:
    if backend_name == "graph":
        backend = _graph_backend(sessions)
        slots = sessions
    else:
        backend = SimBackend(get_profile(profile), num_slots=max(1024, sessions),
                             max_seq_len=4096, sleep=lambda s: None)
        slots = max(1024, sessions)
    sink = CopySink()
    settings = SchedulerSettings(max_batch_size=slots, max_waiting=4 * sessions)
    loop = EngineLoop(backend, sink, lambda events: None, settings=settings, seed=1)
    events = EventBatch(lambda evs: None)
    live = 0
    submitted = 0

    max_tokens = EXPECTED_FRAMES * FRAME_TOKENS if backend_name == "graph" else 1200

    def top_up() -> None:
        nonlocal live, submitted
        while live < sessions:
            loop.submit(_request(submitted, max_tokens))
            submitted += 1
            live += 1
        loop._drain(events, block=False)

    top_up()
    t_cpu = 0.0
    rows = 0
    frames0 = 0
    prev_rows = 0
    for n in range(warmup + steps):
        if n == warmup:
            frames0 = sink.frames
        before = loop._scheduler.stats().finished
        c0 = time.thread_time()
        loop._step(events)
        loop._publish_stats(going_idle=False)
        c1 = time.thread_time()
        after = loop._scheduler.stats().finished
        live -= after - before
        if n >= warmup:
            t_cpu += c1 - c0
            rows += _rows(backend) - prev_rows
        prev_rows = _rows(backend)
        top_up()
    audio_s = (sink.frames - frames0) * FRAME_SECONDS
    return {"sessions": sessions, "steps": steps, "rows": rows,
            "mean_batch": rows / steps, "cpu_s": round(t_cpu, 4),
            "us_per_step": round(t_cpu / steps * 1e6, 1),
            "us_per_row": round(t_cpu / rows * 1e6, 3),
            "audio_s": round(audio_s, 1),
            "cpu_s_per_audio_s": round(t_cpu / audio_s, 6) if audio_s else None}


def _rows(backend) -> int:
    """Rows stepped so far: the sim counts them; the graph bench's launch wrapper too."""
    return backend.counters["rows"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", default="512", help="one count or several, comma-separated")
    ap.add_argument("--backend", choices=("sim", "graph"), default="sim")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--profile", default="h100-fp8")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    for _ in range(a.repeat):
        for sessions in (int(n) for n in a.sessions.split(",")):
            print(json.dumps({"backend": a.backend, **run(sessions, a.steps, a.warmup,
                                                           a.profile, a.backend)}), flush=True)


if __name__ == "__main__":
    main()
