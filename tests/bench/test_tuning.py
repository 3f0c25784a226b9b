"""Tuning search over concurrency with a stand-in level (no server): doubling, then bisection."""

from orpheus_bench.load import WorkerSpec
from orpheus_bench.runner import Options, Runner


class FakeRunner(Runner):
    def __init__(self, capacity):
        base = WorkerSpec(worker=0, procs=1, target="x:1", concurrency=1, requests=1,
                          duration_s=None, ramp_s=0, text_set="conversational", text_count=1,
                          text_seed=0, input="whole", input_rate=15)
        super().__init__(Options(target="x:1", base=base), log=lambda m: None)
        self.capacity = capacity
        self.levels = []

    def level(self, concurrency, requests, label, duration_s=None):
        self.levels.append((concurrency, requests))
        ok = concurrency <= self.capacity
        return {"concurrency": concurrency, "slo": {"pass": ok, "failures": [] if ok else ["x"]}}


def test_doubles_until_failure_then_bisects_to_the_resolution():
    r = FakeRunner(capacity=300)
    out = r.tuning(start=8, factor=2, max_c=1024, resolution=0.05, requests=None, rounds=2,
                   duration_s=None)
    probes = [c for c, _ in r.levels]
    assert probes[:7] == [8, 16, 32, 64, 128, 256, 512]
    assert out["max_passing_concurrency"] <= 300 < out["first_failing_concurrency"]
    assert out["first_failing_concurrency"] - out["max_passing_concurrency"] <= max(1, int(300 * 0.05))
    assert all(req == 2 * c for c, req in r.levels)  # rounds x concurrency sessions


def test_failing_at_the_start_reports_no_passing_level():
    r = FakeRunner(capacity=4)
    out = r.tuning(start=8, factor=2, max_c=64, resolution=0.1, requests=None, rounds=1,
                   duration_s=None)
    assert out["max_passing_concurrency"] is None and out["first_failing_concurrency"] == 8


def test_never_failing_stops_at_the_maximum():
    r = FakeRunner(capacity=10_000)
    out = r.tuning(start=8, factor=2, max_c=100, resolution=0.1, requests=16, rounds=1,
                   duration_s=None)
    assert out["max_passing_concurrency"] == 64 and out["first_failing_concurrency"] is None
    assert all(req == 16 for _, req in r.levels)
