"""The graph engine's batch buckets (engine/graph/buckets.py, pure: no torch): which batch
sizes get a CUDA graph, which one a step of n rows runs in, and the padding rows.

Pinned before the backend move of issue 38: the mutation audit found that `bisect_left` ->
`bisect_right` in `bucket_for` (a full batch raises and fails every row) passed every test."""

import numpy as np
import pytest

from orpheus_svc.engine.graph.buckets import INPUT_ROWS, batch_buckets, bucket_for, pack_inputs

# Powers of two to 16, steps of 16 to 64, of 32 to 256, of 64 beyond, then max_batch itself
BUCKETS_300 = [1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 160, 192, 224, 256, 300]


def test_the_buckets_grow_by_powers_of_two_then_steps_of_16_32_and_64():
    assert batch_buckets(300) == BUCKETS_300
    assert batch_buckets(512) == BUCKETS_300[:-1] + [320, 384, 448, 512]


@pytest.mark.parametrize("max_batch,expected", [
    (1, [1]), (2, [1, 2]), (3, [1, 2, 3]), (8, [1, 2, 4, 8]), (16, [1, 2, 4, 8, 16]),
    (17, [1, 2, 4, 8, 16, 17]), (32, [1, 2, 4, 8, 16, 32]), (33, [1, 2, 4, 8, 16, 32, 33]),
    (64, [1, 2, 4, 8, 16, 32, 48, 64]), (65, [1, 2, 4, 8, 16, 32, 48, 64, 65]),
    (96, [1, 2, 4, 8, 16, 32, 48, 64, 96]), (256, BUCKETS_300[:-1]),
    (257, BUCKETS_300[:-1] + [257]), (320, BUCKETS_300[:-1] + [320]),
])
def test_the_largest_bucket_is_max_batch_and_no_bucket_repeats(max_batch, expected):
    assert batch_buckets(max_batch) == expected


@pytest.mark.parametrize("bad", [0, -1])
def test_a_max_batch_below_one_is_refused(bad):
    with pytest.raises(ValueError, match="max_batch"):
        batch_buckets(bad)


def test_a_step_runs_in_the_smallest_bucket_that_holds_it_at_every_edge():
    """Caught planted bug: `bisect_right` (a step of exactly a bucket's rows ran in the next
    bucket up, and a full batch of max_batch_size rows raised)."""
    for below, bucket in zip([0] + BUCKETS_300, BUCKETS_300):
        assert bucket_for(BUCKETS_300, bucket) == bucket  # exactly full: no padding
        assert bucket_for(BUCKETS_300, below + 1) == bucket  # one past the bucket below


def test_a_full_batch_has_a_bucket_and_one_row_more_or_none_is_refused():
    """Caught planted bug: `bisect_right` made a step of exactly max_batch_size rows raise."""
    for max_batch in (1, 6, 16, 17, 64, 300):
        buckets = batch_buckets(max_batch)
        assert bucket_for(buckets, max_batch) == max_batch
        for n in (max_batch + 1, 0):
            with pytest.raises(ValueError) as err:
                bucket_for(buckets, n)
            assert str(err.value) == (f"{n} rows: the graph engine runs 1..{max_batch} decode "
                                      "rows a step (engine.max_batch_size)")


def test_padding_rows_point_at_the_dummy_slot_with_everything_else_zero():
    out = np.full((len(INPUT_ROWS), 8), 7, np.int64)  # stale values from a wider step
    slots, pos = np.array([3, 0, 5]), np.array([40, 11, 9])
    fpos, stop_ok, counter = np.array([6, 0, 2]), np.array([0, 1, 0]), np.array([30, 4, 2])
    pack_inputs(out, 9, slots, pos, fpos, stop_ok, counter, bucket=4)
    assert out[:, :3].tolist() == [slots.tolist(), pos.tolist(), fpos.tolist(),
                                   stop_ok.tolist(), counter.tolist()]
    assert out[:, 3].tolist() == [9, 0, 0, 0, 0]  # dummy slot, position 0, stop forbidden
    assert (out[:, 4:] == 7).all()  # beyond the bucket: not this step's, left alone
