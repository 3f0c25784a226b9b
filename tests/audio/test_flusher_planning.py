"""Planning only the streams that can have changed gives the events of planning them all.

The flusher plans a stream again only when a command touched it, its windows were left
undecoded, or its withheld audio became due (a wake heap). The reference is a flusher whose
streams (audio/streams.py) give every live stream every iteration (the rule before the dirty
set): PlanEveryStream below.
Both run the same random script: pushes, finals, playout clocks, drops, a clock that moves
between iterations and during decodes (so the iteration deadline cuts), a codec that fails
on poisoned windows, and must emit identical event streams.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from orpheus_svc.audio.flusher import Flusher
from orpheus_svc.audio.settings import HOP, FlusherSettings
from orpheus_svc.audio.streams import Streams
from orpheus_svc.core.events import Finish
from orpheus_svc.core.playout import PlayoutSnapshot

POISON = 4095  # a code 0 of this value in a window makes its decode call fail


class FakeCodec:
    """Deterministic PCM from the codes (so a window or offset mistake shows), a clock that
    each call advances, and failures on poisoned windows."""

    device = torch.device("cpu")
    max_batch_frames = 24

    def __init__(self, call_s: float):
        self.now = 0.0
        self.call_s = call_s

    def clock(self) -> float:
        return self.now

    def latents(self, batch):
        codes = np.stack([np.asarray(w)[:, 0] for w in batch]).astype(np.float32)
        return torch.from_numpy(np.repeat(codes, 4, axis=1))[:, None, :]

    def decode_latents(self, z, keep):
        self.now += self.call_s
        if bool((z == POISON).any()):
            raise RuntimeError("poisoned window")
        pcm = np.repeat(z[:, 0, :].numpy(), HOP, axis=1) / 4096.0
        return pcm[:, keep[0]:keep[1]]


class PlanEveryStream(Streams):
    """The reference: due() keeps its bookkeeping (wakes popped, marks cleared) but gives
    every live stream, in arrival order."""

    def due(self, now):
        super().due(now)
        return list(self._live.items())


def run_script(seed: int, plan_all: bool, settings: FlusherSettings) -> list[tuple]:
    rng = np.random.default_rng(seed)
    codec = FakeCodec(call_s=float(rng.choice([0.0, 0.004, 0.03])))
    out: list[tuple] = []

    def sink(events):
        out.append(tuple((e.gen_id, e.sample_offset, e.pcm.tobytes(), e.final, e.finish)
                         for e in events))

    flusher = Flusher(codec, settings, sink, clock=codec.clock,
                      on_error=lambda ids, exc: f"failed {ids}")
    if plan_all:
        flusher._streams = PlanEveryStream(settings)
    live: list[int] = []
    next_gid = 0
    for _ in range(400):
        for _ in range(int(rng.integers(0, 4))):
            roll = rng.random()
            if roll < 0.12 or not live:
                live.append(next_gid)
                next_gid += 1
            gid = live[int(rng.integers(len(live)))]
            roll = rng.random()
            if roll < 0.04:
                flusher.drop(gid, Finish("cancelled", 1, 2, 3) if rng.random() < 0.5 else None)
                live.remove(gid)
                continue
            n = int(rng.choice([0, 1, 1, 2, 7, 20]))
            frames = rng.integers(0, POISON, (n, 7))
            if n and rng.random() < 0.02:
                frames[int(rng.integers(n)), 0] = POISON
            playout = None
            if rng.random() < 0.3:
                # up to 2 s ahead: later segments, whose first chunk waits (early_first)
                playout = PlayoutSnapshot(codec.now + float(rng.uniform(-0.5, 2.0)))
            final = rng.random() < 0.05
            finish = Finish("stop", 1, 2, 3) if final and rng.random() < 0.5 else None
            flusher.push(gid, frames, final=final, playout=playout, finish=finish)
            if final:
                live.remove(gid)
        flusher.run_once()
        out.append(("wake", flusher._wake_at, flusher.backlog))
        codec.now += float(rng.choice([0.0, 0.001, 0.02, 0.1, 0.5]))
    return out


SETTINGS = [
    FlusherSettings(max_iteration_s=0.01),
    FlusherSettings(first_chunk_samples=0, low_water_samples=8192, max_iteration_s=0.05,
                    chunk_growth=2.0, max_chunk_samples=4 * 2048),
    FlusherSettings(max_decode_frames=1, max_iteration_s=1.0, low_water_samples=0),
]


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("settings", SETTINGS, ids=["default", "hungry", "no-low-water"])
def test_planning_the_changed_streams_matches_planning_all(seed, settings):
    want = run_script(seed, True, settings)
    got = run_script(seed, False, settings)
    assert sum(len(x) for x in want if x and x[0] != "wake") > 50  # the script did something
    assert got == want
