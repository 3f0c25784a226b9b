"""Seeded windows share SNAC calls and keep their bits (issue 33).

A seeded session's windows used to be decoded in a call each (so that their bits could not
depend on their batch-mates), which cost most of a server's capacity under seeded load.
Now a call holding a seeded window has a row count fixed for its shape (audio/calls.py).
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from orpheus_svc.audio.calls import fixed_rows, plan_calls
from orpheus_svc.audio.codec import load_snac
from orpheus_svc.audio.flusher import Flusher
from orpheus_svc.audio.settings import GPU_BATCH_FRAMES, FlusherSettings

from .conftest import random_frames


def frozen() -> float:
    return 0.0


class Counting:
    """A codec that decodes nothing and counts its calls and rows (a GPU-sized call cap)."""

    device = torch.device("cpu")
    max_batch_frames = GPU_BATCH_FRAMES

    def __init__(self):
        self.calls: list[int] = []  # rows of each call

    def latents(self, batch):
        return torch.zeros((len(batch), 1, 4 * len(batch[0])))

    def decode_latents(self, z, keep=None, noise_seeds=None):
        self.calls.append(int(z.shape[0]))
        lo, hi = keep
        return np.zeros((z.shape[0], hi - lo), np.float32)


def _stream_all(codec, settings, seeded: int, unseeded: int, frames: int = 40) -> None:
    """`seeded` + `unseeded` generations pushed frame by frame, all at once, to the end."""
    f = Flusher(codec, settings, lambda events: None, clock=frozen)
    gens = [(g, g < seeded) for g in range(seeded + unseeded)]
    codes = random_frames(frames, seed=1)
    for i in range(frames):
        f.push_many([])
        for g, has_seed in gens:
            f.push(g, codes[i:i + 1], final=i == frames - 1, seed=1000 + g if has_seed else None)
        f.run_once()


@pytest.mark.parametrize("seeded", [8, 32, 64])
def test_seeded_windows_share_calls_instead_of_one_each(seeded):
    """`seeded` sessions' windows through the flusher, every session with the same frames
    at the same times, so each round of windows has one shape: each round takes
    ceil(seeded / rows) calls, rows being the round's fixed call size (its cap, or what
    max_decode_frames allows for its length), never a call per seeded window. The last
    window of a generation is the exception: its length is its own, so it goes in a call
    of one row (audio/calls.py) rather than padded to the cap."""
    def calls(n, settings):
        codec = Counting()
        _stream_all(codec, settings, n, 0)
        return codec.calls

    for settings in (FlusherSettings(), FlusherSettings(seeded_call_windows=4096)):
        rounds = calls(1, settings)  # one call per round: its rows are the fixed size
        assert rounds[-1] == 1 and min(rounds[:-1]) > 1  # the last window: a call alone
        got = calls(seeded, settings)
        want = sum(-(-seeded // rows) for rows in rounds[:-1]) + seeded
        assert len(got) == want < seeded * len(rounds)
    assert set(calls(seeded, FlusherSettings())) == {8, 1}  # the default cap binds the rest


def test_a_call_with_a_seeded_window_always_has_its_fixed_rows():
    rng = random.Random(3)
    for _ in range(200):
        n = rng.randrange(1, 40)
        shapes = [rng.choice([(12, 0, 512), (15, 3072, 5120), (75, 3072, 35840)])
                  for _ in range(n)]
        seeded = [rng.random() < 0.5 for _ in range(n)]
        cap = rng.choice([1, 4, 8, 64])
        calls = plan_calls(shapes, seeded, 1024, cap)
        assert sorted(i for c in calls for i in c.jobs) == list(range(n))  # each job once
        for c in calls:
            per_call = max(1, 4096 // c.num_steps)
            assert all(shapes[i] == (c.num_steps, c.lo, c.hi) for i in c.jobs)
            if any(seeded[i] for i in c.jobs):
                assert c.rows == fixed_rows(per_call, cap) >= len(c.jobs)
            else:
                assert c.rows is None and len(c.jobs) <= per_call
        firsts = [min(c.jobs) for c in calls]
        assert firsts == sorted(firsts)  # most urgent first


def test_spare_rows_of_a_seeded_call_take_unseeded_windows_before_padding():
    shapes = [(12, 0, 512)] * 5
    calls = plan_calls(shapes, [True, False, False, True, False], 1024, 4)
    assert [(c.jobs, c.rows) for c in calls] == [([0, 3, 1, 2], 4), ([4], None)]


def _target_pcm(codec, mates: int, seed: int) -> np.ndarray:
    """Generation 0 (seeded) streamed beside `mates` random generations (some seeded,
    other lengths, other arrival times), frames arriving in random bursts."""
    rng = random.Random(seed)
    out: dict[int, list[np.ndarray]] = {}

    def sink(events):
        for e in events:
            out.setdefault(e.gen_id, []).append(e.pcm)

    f = Flusher(codec, FlusherSettings(), sink, clock=frozen)
    gens = {0: (random_frames(24, seed=77), 4242, 0)}
    for g in range(1, mates + 1):
        gens[g] = (random_frames(rng.randrange(3, 30), seed=100 + g),
                   rng.randrange(1 << 30) if rng.random() < 0.5 else None,
                   rng.randrange(0, 10))
    sent = {g: 0 for g in gens}
    step = 0
    while any(sent[g] < len(codes) for g, (codes, _, _) in gens.items()):
        for g, (codes, s, start) in gens.items():
            if step < start or sent[g] >= len(codes):
                continue
            n = rng.randrange(1, 4) if g else 1
            chunk = codes[sent[g]:sent[g] + n]
            sent[g] += len(chunk)
            f.push(g, chunk, final=sent[g] >= len(codes), seed=s)
        f.run_once()
        step += 1
    f.run_once()
    return np.concatenate(out[0])


def test_a_seeded_window_decodes_to_the_same_bytes_whatever_shares_its_call(tiny_dir):
    """Two intra-op threads: oneDNN then gives a row other bits at batch 1, even and odd
    batch sizes (checked below), so calls of varying size would break this."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        codec = load_snac(tiny_dir, noise=True, seed=5)
        z = codec.latents([random_frames(4, seed=s) for s in range(3)])
        rows = [codec.decode_latents(z[:b], keep=(1024, 4096), noise=False)[0]
                for b in (1, 2, 3)]
        assert not (np.array_equal(rows[0], rows[1]) and np.array_equal(rows[1], rows[2]))
        want = _target_pcm(codec, 0, 0)
        assert len(want) == 24 * 2048
        for mates, seed in ((1, 1), (2, 2), (5, 3), (9, 4)):
            got = _target_pcm(codec, mates, seed)
            assert got.tobytes() == want.tobytes(), f"{mates} mates: other bytes"
    finally:
        torch.set_num_threads(before)
