"""The scheduler's book of sessions: every session's playout clock (core/playout.py), from
its first generation until its last one has ended and its audio has played. Pure Python.

The scheduler asks it for a generation's session (the batch order reads its slack), tells
it of frames and ends, and hands the flusher the snapshots it gives out
(`playout_update`, `playout_moved`): the one model of when each listener plays what.
"""

from __future__ import annotations

import heapq

from .generation import Generation
from .playout import PlayoutSnapshot, SessionPlayout

# A session generating now whose listener has less than this much audio buffered (after
# its first audio) runs dry soon unless it gets steps (SchedulerStats.underrun_risk).
UNDERRUN_RISK_SECONDS = 0.25


class SessionBook:
    def __init__(self) -> None:
        self._sessions: dict[str, SessionPlayout] = {}
        self._moved: dict[str, SessionPlayout] = {}  # lost a generation: playout_moved
        # (when its audio has played, session id) for sessions left without generations
        self._idle_at: list[tuple[float, str]] = []

    def __getitem__(self, gen: Generation) -> SessionPlayout:
        """`gen`'s session (it must have been added)."""
        return self._sessions[gen.request.session_id]

    def of(self, session_id: str) -> SessionPlayout | None:
        return self._sessions.get(session_id)

    def sessions(self) -> list[SessionPlayout]:
        return list(self._sessions.values())

    def add(self, gen: Generation) -> None:
        """`gen` joins its session (created with its first generation)."""
        sid = gen.request.session_id
        session = self._sessions.get(sid)
        if session is None:
            session = self._sessions[sid] = SessionPlayout(sid)
        session.add(gen)

    def on_frames(self, gen: Generation, n: int, now: float) -> None:
        self[gen].on_frames(gen, n, now)

    def leave(self, gen: Generation, now: float, heard: bool) -> list[Generation]:
        """`gen` is no longer its session's; returns the session's other generations,
        whose slack may have dropped (the scheduler judges them afresh)."""
        session = self[gen]
        session.remove(gen, now, heard=heard)
        if session.gens:
            self._moved[session.session_id] = session
        else:
            heapq.heappush(self._idle_at, (session.playout_end or now, session.session_id))
        return session.gens

    def forget_idle(self, now: float) -> None:
        """Drop the sessions without generations whose audio has played. A session's clock
        outlives its generations while its audio plays: a segment that arrives during
        playback is queued behind it, not treated as a fresh request."""
        while self._idle_at and self._idle_at[0][0] <= now:
            _, sid = heapq.heappop(self._idle_at)
            s = self._sessions.get(sid)
            if s is not None and not s.gens and s.buffered_seconds(now) == 0.0:
                del self._sessions[sid]
            # else: gone already, or busy again (pushed anew when it next runs out of work)

    def playout_update(self, gen: Generation, now: float) -> PlayoutSnapshot | None:
        """When the listener reaches `gen`'s audio (core/playout.py), if that may have moved
        since the last snapshot of `gen` handed out (always with the first); else None, also
        once `gen` has ended (its session no longer tracks it). It rides to the flusher with
        `gen`'s frames: the flusher keeps no clock of its own."""
        session = self._sessions.get(gen.request.session_id)
        if gen.finished or session is None or not session.moved(gen):
            return None
        return session.snapshot(gen, now)

    def playout_moved(self, now: float) -> list[tuple[Generation, PlayoutSnapshot]]:
        """Fresh snapshots for generations with frames whose session lost a generation since
        the last call. An earlier segment ending can bring a later one's listener closer at
        once (it stopped short of its estimate), and the later one may make no frames for a
        while (parked): so the flusher hears it now, not with its next frames. The other
        moves only put listeners later, and ride with the next frames."""
        out = []
        for session in self._moved.values():
            out.extend((g, session.snapshot(g, now)) for g in session.gens
                       if g.num_frames and session.moved(g))
        self._moved.clear()
        return out

    def buffered_seconds(self, session_id: str, now: float) -> float:
        s = self._sessions.get(session_id)
        return 0.0 if s is None else s.buffered_seconds(now)

    def underrun_risk(self, now: float) -> int:
        """Sessions generating now with less than UNDERRUN_RISK_SECONDS buffered after their
        first audio (a scan of every session)."""
        return sum(1 for s in self._sessions.values()
                   if s.gens and s.playout_end is not None
                   and s.playout_end - now < UNDERRUN_RISK_SECONDS)
