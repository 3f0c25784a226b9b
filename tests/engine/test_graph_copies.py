"""The graph engine's host-to-device path (engine/graph/inputs.py, GraphRunner.launch): every
chunk of a step sends its rows in one copy, from a contiguous region of the pinned staging
into the bucket's whole contiguous input block, and nothing else writes those blocks.

A spy (a TorchDispatchMode around launch) sees every aten copy whose source lies in the
staging or whose destination lies in an input block; on the CPU the staging cannot be
pinned, so that part is asserted only under CUDA."""

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from orpheus_svc.engine.graph.buckets import bucket_for
from orpheus_svc.engine.graph.inputs import block_words, np_views, views
from orpheus_svc.engine.graph.rows import INPUT, PrefillRow, step_rows
from tests.engine.test_graph_backend import PROMPT, _graph


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


class _CopySpy(TorchDispatchMode):
    """Records (src, dst) of each copy that reads the staging or writes an input block, and
    the name of any other operation that writes an input block."""

    def __init__(self, staging: set[int], blocks: set[int]) -> None:
        super().__init__()
        self.staging, self.blocks = staging, blocks
        self.copies: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.other_writes: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if name == "copy_":
            dst, src = args[0], args[1]
            if _storage(src) in self.staging or _storage(dst) in self.blocks:
                self.copies.append((src, dst))
        elif name.endswith("_") and tensors and _storage(tensors[0]) in self.blocks:
            self.other_writes.append(name)
        elif "out" in kwargs and _storage(kwargs["out"]) in self.blocks:
            self.other_writes.append(name)
        return func(*args, **kwargs)


def _prefill(slot: int, length: int) -> PrefillRow:
    ids = (list(PROMPT) * (length // len(PROMPT) + 1))[:length]
    return PrefillRow(slot=slot, prompt_ids=ids, temperature=0.7, top_p=0.9,
                      repetition_penalty=1.1, seed=5, frame_position=0, stop_allowed=False,
                      counter=0)


def _launch_spied(runner, prefill, decode):
    spy = _CopySpy({_storage(t) for t in runner._staging},
                   {_storage(b) for b in runner._inputs.values()})
    with spy:
        launched = runner.launch(prefill, decode)
    runner.collect(launched)
    return spy


@pytest.mark.parametrize("prompt_len", [1, 40])
def test_each_chunk_is_one_contiguous_copy_into_its_whole_input_block(prompt_len):
    backend = _graph(max_batch=4)
    runner = backend.runner
    decode = np.array([[1, 2], [7, 9], [0, 3], [0, 0], [4, 6], [-1, -1]], np.int64)
    prefill = [_prefill(0, prompt_len)]
    chunks = step_rows(decode, prefill).chunks(runner.capacity)
    assert (len(chunks) > 1) == (2 + prompt_len > runner.capacity)
    spy = _launch_spied(runner, prefill, decode)
    assert not spy.other_writes
    assert len(spy.copies) == len(chunks)
    cuda = runner.device.type == "cuda"
    for (src, dst), (lo, hi) in zip(spy.copies, chunks):
        bucket = _bucket_of(runner, dst)
        assert bucket == bucket_for(runner.buckets, hi - lo)
        block = runner._inputs[bucket]
        assert src.is_contiguous() and dst.is_contiguous()
        assert src.dtype == dst.dtype == torch.int64
        assert dst.data_ptr() == block.data_ptr() and dst.numel() == block.numel()
        assert src.numel() == block.numel()
        assert not cuda or src.is_pinned()


def _bucket_of(runner, dst: torch.Tensor) -> int:
    (bucket,) = [b for b, blk in runner._inputs.items() if blk.data_ptr() == dst.data_ptr()]
    return bucket


def test_the_block_holds_the_rows_the_step_reads():
    """What a chunk's copy carries is what the bucket's step reads through its views: the
    packed rows, then padding on the dummy slot."""
    backend = _graph(max_batch=4)
    runner = backend.runner
    decode = np.array([[1, 2], [7, 9], [0, 3], [0, 0], [4, 6], [-1, -1]], np.int64)
    prefill = [_prefill(0, 1)]
    runner.collect(runner.launch(prefill, decode))
    rows = step_rows(decode, prefill)
    bucket = bucket_for(runner.buckets, 3)
    assert bucket > 3  # a padded bucket
    ints, floats = runner.inputs(bucket)
    np.testing.assert_array_equal(ints[:, :3].numpy(), rows.ints)
    np.testing.assert_array_equal(floats[:, :3].numpy(), rows.floats)
    assert (ints[INPUT["slots"], 3:] == runner.state.dummy).all()


def test_views_of_a_block_are_contiguous_and_disjoint():
    for bucket in (1, 3, 8, 256):
        block = torch.zeros((block_words(bucket) + 8,), dtype=torch.int64)
        ints, floats = views(block, bucket)
        assert ints.is_contiguous() and floats.is_contiguous()
        assert block_words(bucket) % 8 == 0  # 64-byte blocks
        assert floats.data_ptr() >= ints.data_ptr() + ints.numel() * 8
        assert floats.data_ptr() + floats.numel() * 4 <= block.data_ptr() + 8 * block_words(bucket)
        ints.fill_(-1)
        floats.fill_(2.5)
        npi, npf = np_views(block.numpy(), bucket)
        assert (npi == -1).all() and (npf == 2.5).all()
