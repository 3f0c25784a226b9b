"""Benchmark metrics from client-side traces. Pure Python: no grpc, no numpy.

A session's trace is what the client saw: when it sent its first text, when each audio
chunk arrived and how many samples it carried, how the call ended.

Playout model (the listener behind every underrun figure in BENCHMARKS.md). A listener's
player starts `jitter` after the first audio arrives and then consumes audio in real time.
When it has played everything received and the next chunk is not there yet, it stalls (an
underrun) until that chunk arrives, then plays on from there:

    arrivals      c0        c1            c2                 c3
    time    ------|---------|-------------|------------------|------->
    player        |<-jit->[ c0 ][  c1  ]..stall..[   c2   ]  [ c3 ...
                                        ^ buffer empty    ^ c3 was there in time

    drained_at = time the player will have played everything received so far
    chunk at t:  if t > drained_at (and it is not the first chunk): underrun,
                 stall = t - drained_at, drained_at = t
                 then drained_at += samples / rate

`min_slack` is the closest call: the smallest (drained_at - t) over chunks that arrived in
time (how much audio was left in the buffer when the next chunk came).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence


def percentile(values: Iterable[float], q: float) -> float | None:
    """q-th percentile (0..100), linear interpolation between closest ranks (numpy's
    default "linear" method); None for no values."""
    xs = sorted(values)
    if not xs:
        return None
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be in [0, 100], got {q}")
    rank = (len(xs) - 1) * q / 100.0
    lo = math.floor(rank)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (rank - lo)


def summarize(values: Sequence[float], qs: Sequence[float] = (50, 95, 99)) -> dict:
    """{"n", "mean", "min", "max", "p50", "p95", "p99"}; figures None when empty."""
    vals = [v for v in values if v is not None]
    out: dict = {"n": len(vals)}
    out["mean"] = sum(vals) / len(vals) if vals else None
    out["min"] = min(vals) if vals else None
    out["max"] = max(vals) if vals else None
    for q in qs:
        out[f"p{q:g}"] = percentile(vals, q)
    return out


@dataclass(frozen=True)
class Playout:
    underruns: int          # stalls after the first chunk
    stall_s: float          # total time the player waited
    max_stall_s: float
    min_slack_s: float | None  # least audio left in the buffer when a chunk came in time
    audio_s: float
    play_start: float | None   # first arrival + jitter


def playout(arrivals: Sequence[tuple[float, int]], sample_rate: int,
            jitter_s: float = 0.1) -> Playout:
    """Underrun accounting for one session: `arrivals` are (time, samples) in arrival
    order; chunks with 0 samples are ignored. See the module docstring for the model."""
    if sample_rate <= 0:
        raise ValueError(f"sample_rate must be > 0, got {sample_rate}")
    if jitter_s < 0:
        raise ValueError(f"jitter must be >= 0, got {jitter_s}")
    drained_at: float | None = None
    play_start = None
    underruns = 0
    stall = max_stall = 0.0
    min_slack: float | None = None
    total = 0
    last_t = -math.inf
    for t, n in arrivals:
        if t < last_t:
            raise ValueError("arrivals must be in time order")
        last_t = t
        if n <= 0:
            continue
        if drained_at is None:
            play_start = drained_at = t + jitter_s
        elif t > drained_at:
            underruns += 1
            wait = t - drained_at
            stall += wait
            max_stall = max(max_stall, wait)
            drained_at = t
        else:
            slack = drained_at - t
            min_slack = slack if min_slack is None else min(min_slack, slack)
        drained_at += n / sample_rate
        total += n
    return Playout(underruns, stall, max_stall, min_slack, total / sample_rate, play_start)


@dataclass
class SessionTrace:
    """What one client session saw. Times are seconds on the worker's monotonic clock."""

    index: int
    t_start: float                     # first text sent (Synthesize: the call made)
    arrivals: list[tuple[float, int]] = field(default_factory=list)  # audio chunks
    t_end: float | None = None         # call ended (summary or error)
    t_text_ready: float | None = None  # segment 0's text fully sent (streaming input)
    code: str = "OK"                   # grpc status code name
    error: str = ""
    sample_rate: int = 24000
    tokens: int = 0
    segments: int = 0
    server_ttfa_ms: float | None = None  # the summary's time_to_first_audio_ms
    text_chars: int = 0
    worker: int = 0

    @property
    def ok(self) -> bool:
        return self.code == "OK"

    @property
    def first_audio(self) -> float | None:
        return next((t for t, n in self.arrivals if n > 0), None)

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    @classmethod
    def from_dict(cls, d: Mapping) -> "SessionTrace":
        d = dict(d)
        d["arrivals"] = [tuple(a) for a in d.get("arrivals", ())]
        return cls(**d)


@dataclass(frozen=True)
class SessionMetrics:
    index: int
    ok: bool
    code: str
    ttfb_s: float | None        # first text sent -> first audio chunk
    ttfb_text_s: float | None   # segment 0's text complete -> first audio chunk
    audio_s: float
    wall_s: float | None        # first text sent -> call ended
    rtf: float | None           # (last audio - first text) / audio seconds; < 1 is faster than real time
    underruns: int
    stall_s: float
    max_stall_s: float
    min_slack_s: float | None
    tokens: int
    server_ttfa_ms: float | None


def session_metrics(tr: SessionTrace, jitter_s: float = 0.1) -> SessionMetrics:
    first = tr.first_audio
    p = playout(tr.arrivals, tr.sample_rate, jitter_s)
    last = max((t for t, n in tr.arrivals if n > 0), default=None)
    ttfb = None if first is None else first - tr.t_start
    ready = tr.t_text_ready if tr.t_text_ready is not None else tr.t_start
    ttfb_text = None if first is None else max(0.0, first - ready)
    rtf = (last - tr.t_start) / p.audio_s if last is not None and p.audio_s > 0 else None
    wall = None if tr.t_end is None else tr.t_end - tr.t_start
    return SessionMetrics(tr.index, tr.ok, tr.code, ttfb, ttfb_text, p.audio_s, wall, rtf,
                          p.underruns, p.stall_s, p.max_stall_s, p.min_slack_s, tr.tokens,
                          tr.server_ttfa_ms)


def _ms(d: dict) -> dict:
    return {k: (v * 1000 if isinstance(v, float) and k != "n" else v) for k, v in d.items()}


def aggregate(sessions: Sequence[SessionMetrics], wall_s: float) -> dict:
    """Run-level figures over the sessions of one load level (wall_s: the level's duration).

    Latency and underrun figures are over successful sessions; success and status codes
    over all. Throughputs are over the level's wall time.
    """
    ok = [s for s in sessions if s.ok]
    codes: dict[str, int] = {}
    for s in sessions:
        codes[s.code] = codes.get(s.code, 0) + 1
    audio = sum(s.audio_s for s in sessions)
    tokens = sum(s.tokens for s in sessions)
    with_underrun = [s for s in ok if s.underruns > 0]
    return {
        "sessions": len(sessions),
        "succeeded": len(ok),
        "success_rate": len(ok) / len(sessions) if sessions else None,
        "status_codes": dict(sorted(codes.items())),
        "ttfb_ms": _ms(summarize([s.ttfb_s for s in ok])),
        "ttfb_text_ms": _ms(summarize([s.ttfb_text_s for s in ok])),
        "server_ttfa_ms": summarize([s.server_ttfa_ms for s in ok]),
        "rtf": summarize([s.rtf for s in ok]),
        "underruns": {
            "sessions_with_underrun": len(with_underrun),
            "events_total": sum(s.underruns for s in ok),
            "events_per_session_mean": (sum(s.underruns for s in ok) / len(ok)) if ok else None,
            "stall_ms_total": sum(s.stall_s for s in ok) * 1000,
            "stall_ms_per_session": _ms(summarize([s.stall_s for s in ok])),
            "max_stall_ms": max((s.max_stall_s for s in ok), default=0.0) * 1000,
            "min_slack_ms": _ms(summarize([s.min_slack_s for s in ok]))["min"],
        },
        "audio_s_total": audio,
        "audio_s_per_wall_s": audio / wall_s if wall_s > 0 else None,
        "tokens_total": tokens,
        "tokens_per_s": tokens / wall_s if wall_s > 0 else None,
        "wall_s": wall_s,
    }


def slo_check(agg: Mapping, *, ttfb_ms: float = 150.0, percentile_q: float = 95,
              max_underruns: int = 0, min_success: float = 1.0,
              metric: str = "ttfb_ms") -> dict:
    """Whether a level meets the SLO; says which part failed."""
    lat = agg[metric].get(f"p{percentile_q:g}")
    if lat is None:
        values_ok = False
    else:
        values_ok = lat <= ttfb_ms
    under = agg["underruns"]["events_total"]
    success = agg["success_rate"] or 0.0
    failures = []
    if not values_ok:
        failures.append(f"{metric} p{percentile_q:g} {lat if lat is None else round(lat, 1)} > {ttfb_ms}")
    if under > max_underruns:
        failures.append(f"underruns {under} > {max_underruns}")
    if success < min_success:
        failures.append(f"success {success:.3f} < {min_success}")
    return {"pass": not failures, "failures": failures, "metric": metric,
            "ttfb_ms": ttfb_ms, "percentile": percentile_q, "max_underruns": max_underruns,
            "min_success": min_success}
