"""engine/graph/timing.py: the graph engine's per-step counters and their log line."""

from orpheus_svc.engine.graph.timing import StepTimes


def test_steps_are_split_into_device_time_and_idle_time_by_kind():
    t = StepTimes(100.0)
    t.add(64, prefill=False, ahead=True, span_ms=6.0, gap_ms=0.5, wait_ms=5.0, host_ms=0.2)
    t.add(66, prefill=False, ahead=False, span_ms=8.0, gap_ms=1.5, wait_ms=7.0, host_ms=0.4)
    t.add(3, prefill=True, ahead=False, span_ms=20.0, gap_ms=4.0, wait_ms=18.0, host_ms=6.0)
    assert t.steps == 3 and t.ahead == 1
    line = t.report(110.0)
    assert line.startswith("graph engine, last 10.0 s: 3 steps, 33% launched ahead")
    assert "2.20 ms launching and 10.00 ms waiting" in line
    assert "decode-only steps 2 (mean batch 65.0, device 7.00 ms, idle before 1.00 ms)" in line
    assert "steps with prefill 1 (mean batch 3.0, device 20.00 ms, idle before 4.00 ms)" in line
    assert t.steps == 0 and t.started == 110.0  # a fresh window


def test_the_cpu_runner_counts_steps_without_device_times():
    from tests.engine.test_graph_backend import _drive, _graph, _request
    backend = _graph()
    _drive(backend, [_request(0, 9)])
    times = backend.clock.times  # timed from outside the runner (engine/graph/clock.py)
    assert times.steps == 9 and times.prefill.steps == 1 and times.decode.steps == 8
    assert times.decode.span_ms == 0.0  # no CUDA events on the CPU
