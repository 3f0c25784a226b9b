"""Flusher.push_many: the engine's once-per-step hand-off gives the same audio as one
push per generation, and refuses a bad batch whole, in the caller's thread."""

from __future__ import annotations

import numpy as np
import pytest

from orpheus_svc.audio.flusher import Flusher
from orpheus_svc.audio.settings import FlusherSettings
from orpheus_svc.core.events import Finish, FramePush

from .conftest import random_frames
from .test_flusher import Collect, frozen


def _run(tiny_codec, batched: bool) -> Collect:
    sink = Collect()
    flusher = Flusher(tiny_codec, FlusherSettings(), sink, clock=frozen)
    codes = {gid: random_frames(9, seed=gid) for gid in (1, 2, 3)}
    for k in range(3):  # three steps of three frames each; generation 2 ends at the last
        buf = np.concatenate([codes[gid][3 * k:3 * k + 3] for gid in codes])
        pushes = [FramePush(gid, buf[3 * i:3 * i + 3], final=(k == 2 and gid == 2),
                            finish=Finish("stop", 5, 63, 9) if k == 2 and gid == 2 else None)
                  for i, gid in enumerate(codes)]
        if batched:
            flusher.push_many(pushes)
            buf[:] = 0  # the caller reuses its buffer: the flusher kept its own copy
        else:
            for p in pushes:
                flusher.push(*p)
        flusher.run_once()
    return sink


def test_one_push_per_step_gives_the_audio_of_one_push_per_generation(tiny_codec):
    one, many = _run(tiny_codec, batched=False), _run(tiny_codec, batched=True)
    for gid in (1, 2, 3):
        a, b = one.events(gid), many.events(gid)
        assert [(e.sample_offset, e.num_samples, e.final, e.finish) for e in a] == \
            [(e.sample_offset, e.num_samples, e.final, e.finish) for e in b]
        np.testing.assert_array_equal(one.pcm(gid), many.pcm(gid))
    assert many.events(2)[-1].final and many.events(2)[-1].finish.reason == "stop"


@pytest.mark.parametrize("bad", [np.zeros((2, 6), np.int64), np.full((1, 7), 4096)])
def test_a_bad_generation_refuses_the_whole_batch_and_is_named(tiny_codec, bad):
    sink = Collect()
    flusher = Flusher(tiny_codec, FlusherSettings(), sink, clock=frozen)
    with pytest.raises(ValueError, match="generation 8"):
        flusher.push_many([FramePush(7, random_frames(2)), FramePush(8, bad)])
    flusher.run_once()
    assert sink.events() == []  # generation 7's good frames were not queued either
