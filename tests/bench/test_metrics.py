"""Benchmark metric arithmetic on synthetic arrival traces (no server, no timing)."""


import pytest

from orpheus_bench.metrics import (
    SessionTrace,
    aggregate,
    percentile,
    playout,
    session_metrics,
    slo_check,
    summarize,
)

SR = 24000


def realtime_trace(t0, chunks, chunk_s, sr=SR, period=None):
    """Chunks of chunk_s seconds arriving every `period` seconds (default: real time)."""
    period = chunk_s if period is None else period
    return [(t0 + i * period, int(chunk_s * sr)) for i in range(chunks)]


class TestPercentile:
    def test_matches_linear_interpolation_between_ranks(self):
        xs = [15, 20, 35, 40, 50]
        assert percentile(xs, 0) == 15
        assert percentile(xs, 100) == 50
        assert percentile(xs, 50) == 35
        assert percentile(xs, 40) == pytest.approx(29.0)  # rank 1.6 -> 20 + 0.6*15
        assert percentile(xs, 95) == pytest.approx(48.0)

    def test_order_of_input_does_not_matter_and_single_value_is_itself(self):
        assert percentile([3, 1, 2], 50) == 2
        assert percentile([7.5], 99) == 7.5

    def test_empty_is_none_and_out_of_range_q_is_refused(self):
        assert percentile([], 50) is None
        with pytest.raises(ValueError):
            percentile([1, 2], 101)

    def test_p99_of_100_values_sits_between_the_top_two(self):
        xs = list(range(1, 101))
        assert percentile(xs, 99) == pytest.approx(99.01)

    def test_summarize_ignores_none(self):
        s = summarize([1.0, None, 3.0])
        assert s["n"] == 2 and s["mean"] == 2.0 and s["p50"] == 2.0


class TestPlayout:
    def test_audio_arriving_exactly_in_real_time_never_underruns(self):
        p = playout(realtime_trace(10.0, 50, 0.1), SR, jitter_s=0.1)
        assert p.underruns == 0 and p.stall_s == 0
        assert p.audio_s == pytest.approx(5.0)
        assert p.play_start == pytest.approx(10.1)
        assert p.min_slack_s == pytest.approx(0.1)  # the jitter allowance is the margin

    def test_audio_faster_than_real_time_builds_slack(self):
        p = playout(realtime_trace(0.0, 10, 0.5, period=0.1), SR, jitter_s=0.1)
        assert p.underruns == 0
        assert p.min_slack_s == pytest.approx(0.5)  # 0.6 buffered at t=0.1, less 0.1 played

    def test_one_late_chunk_is_one_underrun_of_its_lateness(self):
        arr = [(0.0, SR // 2), (0.5, SR // 2), (1.0, SR // 2)]  # due at 0.6 and 1.1: fine
        arr.append((1.9, SR // 2))  # due at 1.6: 0.3 s late
        p = playout(arr, SR, jitter_s=0.1)
        assert p.underruns == 1
        assert p.stall_s == pytest.approx(0.3)
        assert p.max_stall_s == pytest.approx(0.3)

    def test_after_a_stall_the_schedule_restarts_from_the_late_chunk(self):
        # Late by 1 s once, then chunks keep the new (shifted) pace: only one underrun.
        arr = [(0.0, SR), (2.1, SR), (3.1, SR), (4.1, SR)]
        p = playout(arr, SR, jitter_s=0.1)
        assert p.underruns == 1
        assert p.stall_s == pytest.approx(1.0)

    def test_jitter_allowance_absorbs_small_lateness(self):
        arr = [(0.0, SR // 10), (0.15, SR // 10)]  # second chunk 50 ms after the first ran out
        assert playout(arr, SR, jitter_s=0.1).underruns == 0
        assert playout(arr, SR, jitter_s=0.0).underruns == 1
        assert playout(arr, SR, jitter_s=0.0).stall_s == pytest.approx(0.05)

    def test_every_late_chunk_of_a_slow_stream_counts(self):
        # Half real time: each 0.1 s chunk comes 0.2 s after the previous one.
        p = playout(realtime_trace(0.0, 11, 0.1, period=0.2), SR, jitter_s=0.1)
        assert p.underruns == 9  # chunk 1 arrives at 0.2 = due time: not late
        assert p.stall_s == pytest.approx(0.9)

    def test_empty_chunks_are_ignored_and_no_audio_means_nothing_played(self):
        p = playout([(0.0, 0), (5.0, 0)], SR)
        assert p.underruns == 0 and p.audio_s == 0 and p.play_start is None

    def test_other_sample_rates(self):
        p = playout([(0.0, 8000), (1.2, 8000)], 8000, jitter_s=0.1)
        assert p.underruns == 1 and p.stall_s == pytest.approx(0.1)

    def test_out_of_order_arrivals_are_refused(self):
        with pytest.raises(ValueError):
            playout([(1.0, 10), (0.5, 10)], SR)


class TestSessionAndAggregate:
    def trace(self, index, t_start, first_at, chunks=10, code="OK", text_ready=None, tokens=700):
        tr = SessionTrace(index=index, t_start=t_start, t_text_ready=text_ready, code=code,
                          tokens=tokens)
        if code == "OK":
            tr.arrivals = realtime_trace(first_at, chunks, 0.2, period=0.1)
        tr.t_end = first_at + chunks * 0.1
        return tr

    def test_session_ttfb_rtf_and_text_ttfb(self):
        tr = self.trace(0, t_start=1.0, first_at=1.25, chunks=10, text_ready=1.2)
        m = session_metrics(tr, jitter_s=0.1)
        assert m.ttfb_s == pytest.approx(0.25)
        assert m.ttfb_text_s == pytest.approx(0.05)
        assert m.audio_s == pytest.approx(2.0)
        # last chunk at 1.25 + 0.9 = 2.15: (2.15 - 1.0) / 2.0
        assert m.rtf == pytest.approx(0.575)
        assert m.underruns == 0

    def test_failed_session_has_no_latency(self):
        m = session_metrics(self.trace(3, 0.0, 0.0, code="RESOURCE_EXHAUSTED"))
        assert not m.ok and m.ttfb_s is None and m.audio_s == 0

    def test_aggregate_counts_codes_and_takes_latency_over_successes_only(self):
        sessions = [session_metrics(self.trace(i, 0.0, 0.1 * (i + 1))) for i in range(4)]
        sessions.append(session_metrics(self.trace(9, 0.0, 0.0, code="UNAVAILABLE", tokens=0)))
        agg = aggregate(sessions, wall_s=4.0)
        assert agg["sessions"] == 5 and agg["succeeded"] == 4
        assert agg["success_rate"] == pytest.approx(0.8)
        assert agg["status_codes"] == {"OK": 4, "UNAVAILABLE": 1}
        assert agg["ttfb_ms"]["p50"] == pytest.approx(250.0)
        assert agg["ttfb_ms"]["max"] == pytest.approx(400.0)
        assert agg["audio_s_total"] == pytest.approx(8.0)
        assert agg["audio_s_per_wall_s"] == pytest.approx(2.0)
        assert agg["tokens_per_s"] == pytest.approx(4 * 700 / 4.0)
        assert agg["underruns"]["events_total"] == 0

    def test_aggregate_underrun_figures(self):
        slow = SessionTrace(index=0, t_start=0.0, arrivals=realtime_trace(0.0, 11, 0.1, period=0.2))
        fine = SessionTrace(index=1, t_start=0.0, arrivals=realtime_trace(0.0, 10, 0.1))
        agg = aggregate([session_metrics(slow), session_metrics(fine)], wall_s=3.0)
        u = agg["underruns"]
        assert u["sessions_with_underrun"] == 1
        assert u["events_total"] == 9
        assert u["stall_ms_total"] == pytest.approx(900.0)
        assert u["max_stall_ms"] == pytest.approx(100.0)

    def test_slo_check_names_what_failed(self):
        good = [session_metrics(self.trace(i, 0.0, 0.05)) for i in range(20)]
        assert slo_check(aggregate(good, 1.0))["pass"]
        late = good[:18] + [session_metrics(self.trace(i, 0.0, 0.5)) for i in (18, 19)]
        verdict = slo_check(aggregate(late, 1.0), ttfb_ms=150, percentile_q=95)
        assert not verdict["pass"] and "ttfb_ms p95" in verdict["failures"][0]
        slow = SessionTrace(index=0, t_start=0.0, arrivals=realtime_trace(0.0, 11, 0.1, period=0.2))
        verdict = slo_check(aggregate(good + [session_metrics(slow)], 1.0))
        assert any("underruns" in f for f in verdict["failures"])

    def test_trace_round_trips_through_a_dict(self):
        tr = self.trace(5, 0.0, 0.2, text_ready=0.1)
        back = SessionTrace.from_dict(tr.to_dict())
        assert back == tr
