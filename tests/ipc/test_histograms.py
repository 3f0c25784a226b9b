"""Bucket counts kept in the engine process and served as a Prometheus histogram."""

import pytest

from orpheus_svc.ipc.histograms import BATCH_BOUNDS, BucketCounts, cumulative


def test_counts_land_in_the_bucket_whose_upper_bound_holds_them():
    h = BucketCounts((1, 2, 4))
    for v in (1, 2, 3, 4, 5, 100):
        h.observe(v)
    assert h.state() == [[1, 1, 2, 2], 115.0]  # <=1, <=2, <=4, +Inf


def test_cumulative_buckets_end_with_the_total():
    h = BucketCounts(BATCH_BOUNDS)
    for v in (1, 3, 300, 9000):
        h.observe(v)
    buckets, total = cumulative(BATCH_BOUNDS, h.state())
    assert buckets[0] == ("1", 1) and buckets[2] == ("4", 2)
    assert buckets[-2] == ("512", 3) and buckets[-1] == ("+Inf", 4)
    assert total == pytest.approx(9304)
    assert [n for _, n in buckets] == sorted(n for _, n in buckets)


def test_a_state_is_a_copy():
    h = BucketCounts((1,))
    s = h.state()
    h.observe(1)
    assert s == [[0, 0], 0.0]
