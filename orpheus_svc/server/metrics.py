"""Prometheus metrics on their own port (server.metrics_port; 0 = off).

Gauges and totals are read at scrape time from ServerState.snapshot(): an immutable
MetricsSnapshot the event loop computes for the scrape (this thread never touches the loop's
live state), so the hot path pays nothing for them. Only three things are observed as they
happen: the engine's batch size and step period (one callback per step from the engine
thread: two histogram observations, nothing else), the codec's windows per decode call (from
the flusher thread), and, on the loop, each session's time to first audio, each
generation's admission wait and time to first token (from its end event, engine/loop.py
Finish) and the audio a listener got late (server/lateness.py). No label names a session.
prometheus_client's histograms are thread-safe.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from orpheus_svc.ipc.histograms import BATCH_BOUNDS, STEP_BOUNDS, cumulative

from .state import ServerState

# The engine's per-step histograms: (name, help, upper bounds). Observed here in single
# mode, in the engine process in split mode (ipc/histograms.py EngineHistograms).
ENGINE_HISTOGRAMS = {
    "batch_size": ("orpheus_engine_batch_size", "Generations per engine step", BATCH_BOUNDS),
    "step_seconds": ("orpheus_engine_step_seconds",
                     "Engine step period: from the end of the previous step (or the start of "
                     "this one after a wait for work) to this step's tokens; above 0.01219 s "
                     "every running session falls behind real time", STEP_BOUNDS),
    "codec_batch": ("orpheus_codec_batch_windows",
                    "Decode windows (across sessions) per SNAC call", BATCH_BOUNDS),
}
_TTFA_BUCKETS = (0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.0, 5.0)
# engine-side waits: a queue that holds generations for seconds must show as such
_WAIT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class _StateCollector:
    def __init__(self, state: ServerState) -> None:
        self.state = state

    def collect(self):
        snap = self.state.snapshot()
        st = snap.status
        gauges = {
            # what the HPA scales on: calls with work (text being spoken or audio pending);
            # idle calls waiting for their client are orpheus_sessions_idle
            "orpheus_sessions_active": ("Open synthesis calls with something to speak",
                                        st.active_sessions - st.idle_sessions),
            "orpheus_sessions_open": ("Open synthesis calls, idle ones included",
                                      st.active_sessions),
            "orpheus_sessions_idle": ("Open calls with nothing to speak, waiting for the client",
                                      st.idle_sessions),
            "orpheus_sessions_limit": ("server.max_sessions: open calls allowed (0 = no limit)",
                                       st.max_sessions),
            "orpheus_streams_per_connection_limit": (
                "server.max_concurrent_streams (0 = gRPC's default)", st.max_concurrent_streams),
            "orpheus_session_idle_timeout_seconds": ("session.idle_timeout_seconds (0 = off)",
                                                     st.idle_timeout_seconds),
            "orpheus_session_stalled_consumer_timeout_seconds": (
                "session.stalled_consumer_timeout_seconds (0 = off)",
                st.stalled_consumer_timeout_seconds),
            "orpheus_generations_active": ("Generations holding a KV slot", st.active_generations),
            "orpheus_generations_waiting": ("Generations queued for a slot", st.waiting_generations),
            "orpheus_slots_used": ("KV slots in use", st.total_slots - st.free_slots),
            "orpheus_slots_free": ("KV slots free", st.free_slots),
            "orpheus_underrun_risk_sessions": (
                "Sessions generating with under 250 ms of audio buffered ahead of playback",
                snap.underrun_risk),
            "orpheus_row_budget_generations": (
                "Generations the real-time row budget lets run at once (engine.row_budget; "
                "0 = off or not measured yet)", snap.row_budget),
            "orpheus_serving": ("1 when the model is loaded and the server accepts sessions",
                                int(st.serving)),
        }
        for name, (doc, value) in gauges.items():
            yield GaugeMetricFamily(name, doc, value=value)
        counters = {
            "orpheus_sessions": ("Synthesis calls started", st.sessions_total),
            "orpheus_generations": ("Generations submitted", st.generations_total),
            "orpheus_engine_steps": ("Engine steps", st.steps_total),
            "orpheus_tokens": ("Audio tokens generated", st.tokens_total),
            "orpheus_audio_seconds": ("Seconds of audio streamed", st.audio_seconds_total),
            "orpheus_rejected": ("Sessions refused: server full", st.rejected_total),
            "orpheus_grammar_violations": ("Tokens outside the audio grammar",
                                           st.grammar_violations),
            "orpheus_sessions_refused": ("Calls refused at once: server.max_sessions open",
                                         st.sessions_refused_total),
            "orpheus_failed_generations": ("Generations failed by a backend or codec error",
                                           st.failed_generations_total),
        }
        for name, (doc, value) in counters.items():
            yield CounterMetricFamily(name, doc, value=value)
        errors = CounterMetricFamily("orpheus_errors", "Calls that ended with an error status",
                                     labels=["code"])
        for code, n in snap.errors:
            errors.add_metric([code], n)
        yield errors
        timeouts = CounterMetricFamily("orpheus_session_timeouts",
                                       "Calls ended by a time limit (DEADLINE_EXCEEDED)",
                                       labels=["reason"])
        timeouts.add_metric(["idle"], st.idle_timeouts_total)
        timeouts.add_metric(["stalled_consumer"], st.stalled_timeouts_total)
        yield timeouts
        http = CounterMetricFamily("orpheus_http_refused",
                                   "HTTP requests and connections refused or ended by an http.* "
                                   "bound (body size or time, head time, pending connections, "
                                   "WebSocket config time)", labels=["reason"])
        for reason, n in snap.http_refused:
            http.add_metric([reason], n)
        yield http


class _EngineHistograms:
    """Split topology: the engine process's per-step histograms, from its latest stats
    snapshot (nothing before the engine is warm)."""

    def __init__(self, state: ServerState) -> None:
        self.state = state

    def collect(self):
        runtime = self.state.runtime
        snap = getattr(getattr(runtime, "engine", None), "snapshot", None)
        hists = snap.extra.get("histograms", {}) if snap is not None else {}
        for key, (name, doc, bounds) in ENGINE_HISTOGRAMS.items():
            if key in hists:
                buckets, total = cumulative(bounds, hists[key])
                yield HistogramMetricFamily(name, doc, buckets=buckets, sum_value=total)


class Metrics:
    """`engine`: "local" (single mode: the engine's callbacks observe batch_size,
    step_seconds and codec_batch), "remote" (split front-end 0: served from the engine's
    snapshots) or None (the other front-ends: not served, so a sum over front-ends counts
    them once)."""

    def __init__(self, state: ServerState, engine: str | None = "local") -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_StateCollector(state))
        self.batch_size = self.step_seconds = self.codec_batch = None
        if engine == "local":
            for key, (name, doc, bounds) in ENGINE_HISTOGRAMS.items():
                setattr(self, key, Histogram(name, doc, buckets=bounds, registry=self.registry))
        elif engine == "remote":
            self.registry.register(_EngineHistograms(state))
        self.ttfa = Histogram("orpheus_time_to_first_audio_seconds",
                              "First text received to first audio chunk sent (server side)",
                              buckets=_TTFA_BUCKETS, registry=self.registry)
        # segment: "first" (the session's first segment: what its time to first audio
        # waits for) or "later"
        self.admission_wait = Histogram(
            "orpheus_admission_wait_seconds", "A generation's wait for a KV slot: from its "
            "arrival at the engine to its admission", ["segment"], buckets=_WAIT_BUCKETS,
            registry=self.registry)
        self.first_token = Histogram(
            "orpheus_first_token_seconds", "From a generation's admission to its first token "
            "(the prefill, and the steps it waited for one)", ["segment"],
            buckets=_WAIT_BUCKETS, registry=self.registry)
        self.late_audio = Counter(
            "orpheus_late_audio_seconds", "Audio sent after the listener would have played "
            "it: the server's view of an underrun (server/lateness.py)", registry=self.registry)
        for segment in ("first", "later"):  # both series exist from the start
            self.admission_wait.labels(segment)
            self.first_token.labels(segment)

    def on_step(self, batch: int, seconds: float) -> None:
        """build_runtime's on_step (the engine thread, once per step)."""
        self.batch_size.observe(batch)
        self.step_seconds.observe(seconds)

    def observe_generation(self, segment_index: int, queued_s: float | None,
                           first_token_s: float | None) -> None:
        """A generation ended (the loop): its engine-side waits, when it got that far."""
        label = "first" if segment_index == 0 else "later"
        if queued_s is not None:
            self.admission_wait.labels(label).observe(queued_s)
            if first_token_s is not None:
                self.first_token.labels(label).observe(first_token_s - queued_s)

    def serve(self, port: int, host: str = "0.0.0.0") -> None:
        start_http_server(port, addr=host, registry=self.registry)
