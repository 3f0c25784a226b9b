"""Streaming SNAC flusher: frames in (from the engine thread), PCM events out, on its own thread.

Each iteration: drain the commands pushed since the last one, plan the due windows
(audio/windows.py) of the generations whose plan can have changed (see _due_streams),
decode windows of equal length together in as few SNAC calls as max_decode_frames (by
default the codec's max_batch_frames) allows, cut each window's exact samples and hand the
events of the iteration to the sink: first audio (a generation's first window) in one call
as soon as it is decoded, the rest in one call after. Windows are decoded most urgent first
(first chunks, then the listeners with the least audio buffered), and an iteration starts
no SNAC call after max_iteration_s: what is left waits for the next iteration, which
follows at once. push_many() (once per engine step), push() and drop() only append to a
queue under a lock, so the producer never waits for a decode. How much audio a listener
has buffered comes from the scheduler's playout clock (a PlayoutSnapshot, core/playout.py,
pushed with the frames) and the samples sent here.

A generation pushed with a seed (a seeded session's) decodes the same tokens to the same
PCM every time, whatever else is decoded: its windows follow its frames alone (windows.py
plan_fixed_windows), share calls of a row count fixed for their shape with other windows
(a call's rows differ in the last float bits by its size: audio/calls.py) and draw SNAC's
noise from a seed of the generation's and the window's (codec.py).

Guarantees per generation: offsets are contiguous from 0; F frames give exactly F*2048
samples; the last event has final=True (a generation with no frames gets one empty final
event) and carries the Finish pushed with the last frames; after drop() returns, no sink
call that starts later carries that generation, except, when drop() was given a Finish,
one empty final event with it (unless the generation had ended already). So each
generation the engine feeds ends with exactly one final event, from this thread, after
all of its audio (the engine thread never emits a generation's end itself).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch

from orpheus_svc.audio.calls import plan_calls
from orpheus_svc.audio.settings import CPU_BATCH_FRAMES, HOP, FlusherSettings
from orpheus_svc.audio.windows import (
    Window, chunk_target, plan_fixed_windows, plan_windows, ready_end,
)
from orpheus_svc.core.events import AudioEvent, Finish, FramePush
from orpheus_svc.core.playout import PlayoutSnapshot
from orpheus_svc.core.tokens import CODES_PER_POSITION, FRAME_TOKENS, SAMPLE_RATE, SAMPLES_PER_FRAME
from orpheus_svc.threads import os_named

log = logging.getLogger(__name__)

AudioSink = Callable[[Sequence[AudioEvent]], None]
ErrorHandler = Callable[[Sequence[int], BaseException], str | None]  # -> the client message

_CLOSED_MEMORY = 65536  # ids of ended generations remembered, to ignore stray late pushes
# A withheld chunk's stream is planned again this long before its computed hungry time, so
# float rounding in that time can never make it late (planning early only finds nothing).
_WAKE_SLACK_S = 1e-6


@dataclass
class _Stream:
    """One generation's codes and how much of its audio went out.

    The listener's clock is the scheduler's (core/playout.py), given as `playout` with the
    frames; the flusher adds only what it knows itself: the samples it has sent (`emitted`).
    By that rule the listener holds sent audio not yet played: never audio the scheduler
    counts as generated but the flusher still holds. Without a snapshot (a caller with no
    scheduler) the flusher knows no listener: chunk targets only, ranked after the others.
    """

    frames: list[np.ndarray] = field(default_factory=list)
    num_frames: int = 0
    final: bool = False
    finish: Finish | None = None  # how it ended, pushed with the last frames
    emitted: int = 0
    playout: PlayoutSnapshot | None = None  # the latest the engine gave
    seq: int = 0  # arrival order among the flusher's streams (the order they are planned in)
    seed: int | None = None  # a seeded session's: reproducible audio (module docstring)
    wake_at: float | None = None  # when its withheld audio becomes due (its valid heap entry)

    def buffered(self, now: float) -> float:
        """Samples the listener has yet to play of what was sent (negative: it is past the
        sent audio, so dry now; +inf when no playout clock is known)."""
        if self.playout is None:
            return float("inf")
        return self.playout.buffered_samples(self.emitted, now)

    def listener(self, now: float, low_water_samples: int) -> tuple[bool, int]:
        """(hungry, ahead) from one reading of the buffer. hungry: the listener is about to
        run dry (only once its first audio went out: the first chunk goes as soon as it
        exists anyway). ahead: samples it has to play before it runs out of what was sent
        (0 when no playout clock is known, or dry)."""
        b = self.buffered(now)
        return (self.emitted > 0 and b < low_water_samples,
                int(b) if 0 < b < float("inf") else 0)

    def urgency(self, now: float) -> tuple[int, float]:
        """Sort key, most urgent first: a listener waiting for its first audio now (time to
        first audio), then the least audio buffered (closest to running dry); a segment
        whose playback starts later ranks by how soon it does."""
        if self.awaited_first(now):
            return (0, 0.0)
        return (1, self.buffered(now))

    def awaited_first(self, now: float) -> bool:
        """Is a listener waiting for this stream's first audio now?"""
        return self.emitted == 0 and (self.playout is None or self.playout.starts_at <= now)

    def codes(self) -> np.ndarray:
        if len(self.frames) > 1:
            self.frames = [np.concatenate(self.frames)]
        return self.frames[0] if self.frames else np.zeros((0, FRAME_TOKENS), np.int64)


def _window_seed(seed: int, w: Window) -> int:
    """The noise seed of one window of a seeded generation: its seed and where it lies."""
    return (seed * 0x9E3779B97F4A7C15 + w.start * 0x100000001B3 + w.end) % (1 << 63)


class Flusher:
    """Turns pushed frames into AudioEvents. See the module docstring for the guarantees.

    `sink` is called from the flusher thread with a non-empty list of AudioEvents, once per
    iteration (twice when it decodes first audio and more: the first audio goes first).
    `on_error(gen_ids, exc)` is called if a decode fails and returns the message for those
    generations' final events (Finish reason "error"); they are then forgotten (default:
    log the error).
    """

    def __init__(self, codec, settings: FlusherSettings, sink: AudioSink,
                 on_error: ErrorHandler | None = None, name: str = "snac-flusher",
                 clock: Callable[[], float] = time.monotonic,
                 on_decode: Callable[[int], None] | None = None):
        self.codec = codec
        self.clock = clock  # seconds; injectable so tests and benchmarks can simulate time
        self.settings = settings
        # Frames per SNAC call: the setting, else what suits the codec (a GPU wants few calls).
        self.max_decode_frames = (settings.max_decode_frames
                                  or getattr(codec, "max_batch_frames", CPU_BATCH_FRAMES))
        self.sink = sink
        self.on_error = on_error
        self.on_decode = on_decode  # called with the windows of each SNAC call (metrics)
        self._name = name
        self._lock = threading.Condition(threading.Lock())
        # (gen_id, frames, final, playout, finish, seed); frames None = drop
        self._commands: list[tuple[int, np.ndarray | None, bool, PlayoutSnapshot | None,
                                   Finish | None, int | None]] = []
        self._dropped: set[int] = set()  # dropped since the last drain: filter in-flight output
        self._ends: list[AudioEvent] = []  # final events of dropped/failed generations, to emit
        self._unsent: dict[int, int] = {}  # dropped gen -> offset of its first filtered event
        self._streams: dict[int, _Stream] = {}
        self._closed: OrderedDict[int, None] = OrderedDict()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._wake_at: float | None = None  # clock time a withheld chunk becomes due
        # Only these streams are planned: those touched since their last plan (commands,
        # windows left undecoded) and those whose withheld audio became due (the heap).
        self._dirty: set[int] = set()
        self._wakes: list[tuple[float, int, int, _Stream]] = []  # (time, tie, gid, stream)
        self._tie = itertools.count()
        self._seq = itertools.count()
        self._plan_all = False  # tests only: plan every stream every iteration (the reference)
        self.backlog = False  # the last iteration left due windows undecoded (time limit)
        # Counters (flusher thread only; read them for metrics, never reset them).
        self.num_decode_calls = 0
        self.num_decoded_samples = 0  # window lengths decoded, context included
        self.num_padded_windows = 0  # zero rows added to fixed-size calls (audio/calls.py)
        self.num_iterations = 0

    # -- producer side (any thread) -------------------------------------------------------
    def push(self, gen_id: int, frames: np.ndarray, final: bool = False,
             playout: PlayoutSnapshot | None = None, finish: Finish | None = None,
             seed: int | None = None) -> None:
        """Append frames ([n, 7] codes, n may be 0) to a generation; final: no more will come.
        playout: the scheduler's clock for this generation (when its listener reaches it, on
        the flusher's clock), given with the first frames and again whenever it moved (with
        n = 0 when no frames come along); the latest replaces the one before.
        finish: how the generation ended (implies final); its final event carries it.
        seed: the generation's sampling seed when its session gave one (with its first
        frames, or every push): its audio is then reproducible (module docstring).

        Raises ValueError at once (in the caller's thread, where the bug is) for a wrong
        shape or a code outside 0..4095; otherwise never waits for the flusher.
        """
        self.push_many([FramePush(gen_id, frames, final, playout, finish, seed)])

    def push_many(self, pushes: Sequence[FramePush]) -> None:
        """push() for several generations at once: the engine's hand-off, once per step. One
        copy and one range check of all their codes, one lock, one wake-up; nothing is
        queued if any of them is refused."""
        arrays = []
        for p in pushes:
            frames = np.asarray(p.frames, dtype=np.int64)
            if frames.size == 0:
                frames = frames.reshape(0, FRAME_TOKENS)
            if frames.ndim != 2 or frames.shape[1] != FRAME_TOKENS:
                raise ValueError(f"frames must have shape [n, 7], got {frames.shape} "
                                 f"(generation {p.gen_id})")
            arrays.append(frames)
        if not arrays:
            return
        codes = np.concatenate(arrays)  # own copy: the caller may reuse its buffers
        if codes.size and (codes.min() < 0 or codes.max() >= CODES_PER_POSITION):
            bad = [p.gen_id for p, f in zip(pushes, arrays)
                   if f.size and (f.min() < 0 or f.max() >= CODES_PER_POSITION)]
            raise ValueError(f"codes must be 0..{CODES_PER_POSITION - 1} (generation "
                             f"{', '.join(map(str, bad))})")
        commands = []
        at = 0
        for p, frames in zip(pushes, arrays):
            n = len(frames)
            commands.append((p.gen_id, codes[at:at + n], p.final or p.finish is not None,
                             p.playout, p.finish, p.seed))
            at += n
        with self._lock:
            self._commands.extend(commands)
            self._lock.notify()

    def drop(self, gen_id: int, finish: Finish | None = None) -> None:
        """Forget a cancelled or failed generation: no audio of it is emitted by later sink
        calls. With `finish`, an empty final event carrying it follows (where its audio
        stopped), unless the generation's final event was emitted already."""
        with self._lock:
            self._commands.append((gen_id, None, True, None, finish, None))
            self._dropped.add(gen_id)
            self._lock.notify()

    # -- thread control -------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("flusher already started")
        self._stopping = False
        self._thread = threading.Thread(target=os_named(self._run), name=self._name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Finish the current iteration and end the thread; audio not yet due is discarded."""
        with self._lock:
            self._stopping = True
            self._lock.notify()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        stream = torch.cuda.Stream(self.codec.device) if self.codec.device.type == "cuda" else None
        while True:
            with self._lock:
                while not self._commands and not self._stopping and not self.backlog:
                    timeout = None if self._wake_at is None else self._wake_at - self.clock()
                    if timeout is not None and timeout <= 0:
                        break  # a listener is due to run dry: release its withheld audio
                    self._lock.wait(timeout)
                if self._stopping:
                    return
            try:
                if stream is not None:
                    with torch.cuda.stream(stream):  # off the engine's default stream
                        self.run_once()
                else:
                    self.run_once()
            except Exception:  # never let the thread die silently; the iteration is lost
                log.exception("flusher iteration failed")

    # -- one iteration (flusher thread; also callable directly, e.g. by benchmarks) --------
    def run_once(self) -> int:
        """Drain, plan, decode, emit. Returns the number of events handed to the sink.

        The thread calls this; call it yourself only on a flusher that was not started.
        """
        self.num_iterations += 1
        self._drain()
        now = self.clock()
        low = self.settings.low_water_samples
        events, self._ends = self._ends, []  # ends of dropped generations (from _drain)
        due: list[tuple[int, _Stream, list[Window]]] = []
        planned = self._due_streams(now)
        for gid, st in planned:
            if st.seed is not None:
                windows = plan_fixed_windows(st.num_frames, st.final, st.emitted,
                                             self.settings)
            else:
                hungry, ahead = st.listener(now, low)
                windows = plan_windows(st.num_frames, st.final, st.emitted, self.settings,
                                       hungry=hungry, ahead=ahead)
            if windows:
                due.append((gid, st, windows))
            elif st.final and st.emitted == st.num_frames * SAMPLES_PER_FRAME:
                # Nothing left to decode (no frames at all, or all sent before `final` came).
                events.append(AudioEvent(gid, np.zeros(0, np.float32), st.emitted, final=True,
                                         finish=st.finish))
        # Only generations with windows due are ranked (stable: arrival order among equals).
        due.sort(key=lambda d: d[1].urgency(now))
        jobs = [(gid, st, w) for gid, st, windows in due for w in windows]
        # First audio that a listener waits for now (the most urgent jobs: a prefix) goes
        # out before the rest of the iteration is decoded, which can take tens of ms.
        n_first = sum(1 for _, st, _ in jobs if st.awaited_first(now))
        phases = [jobs[:n_first], jobs[n_first:]] if 0 < n_first < len(jobs) else [jobs]
        deadline = now + self.settings.max_iteration_s
        cut: set[int] = set()  # generations with a window left undecoded this time
        sent = 0
        for k, phase in enumerate(phases):
            if k and (self.backlog or self.clock() >= deadline):  # out of time: the rest waits
                cut.update(gid for gid, _, _ in phase)
                self.backlog = True
                break
            pcm, self.backlog = self._decode(phase, deadline)
            for (gid, st, w), audio in zip(phase, pcm):
                if gid not in self._streams:  # its decode failed
                    continue
                if audio is None or gid in cut:  # out of time: it and what follows wait
                    cut.add(gid)
                    continue
                is_last = st.final and w.end == st.num_frames * SAMPLES_PER_FRAME
                events.append(AudioEvent(gid, audio, w.start, final=is_last,
                                         finish=st.finish if is_last else None))
                st.emitted = w.end
            if k + 1 < len(phases):
                sent += self._emit(events)
                events = []
        events += self._ends  # failed decodes (_fail)
        self._ends = []
        self._dirty.update(cut)
        for gid, st in planned:
            if gid not in cut and self._streams.get(gid) is st:
                self._schedule_wake(gid, st)
        self._wake_at = self._next_wake()
        return sent + self._emit(events)

    def _emit(self, events: list[AudioEvent]) -> int:
        """Close the generations that end in `events`, and hand the sink those not dropped
        meanwhile; returns how many went."""
        for event in events:
            if event.final:
                self._close(event.gen_id)
        with self._lock:
            events = self._unless_dropped(events)
        if events:
            self.sink(events)
        return len(events)

    def _due_streams(self, now: float) -> list[tuple[int, _Stream]]:
        """The streams whose plan can differ from their last one, in arrival order.

        A stream's windows depend on its frames, final flag and playout (changed only by a
        command: _drain marks it), on the audio it was sent (a stream whose windows were all
        decoded has nothing ready left; one cut short is marked) and on the time only
        through `hungry`, which turns true once, at the time _schedule_wake put on the heap.
        Planning any other stream would find nothing, so the events are those of planning
        every stream every iteration.
        """
        heap = self._wakes
        while heap and heap[0][0] - _WAKE_SLACK_S <= now:
            t, _, gid, st = heapq.heappop(heap)
            if st.wake_at == t and self._streams.get(gid) is st:
                st.wake_at = None
                self._dirty.add(gid)
        if self._plan_all:
            self._dirty.clear()
            return list(self._streams.items())
        found = [(st.seq, gid, st) for gid in self._dirty
                 if (st := self._streams.get(gid)) is not None]
        self._dirty.clear()
        found.sort()
        return [(gid, st) for _, gid, st in found]

    def _schedule_wake(self, gid: int, st: _Stream) -> None:
        """After planning `st`: when its ready-but-withheld audio becomes due because the
        listener runs low (no wake without a playout clock or before the first audio).

        Frames arriving wake the flusher anyway; this covers a generation that stalls
        (a busy engine) while audio it already produced waits for the chunk target.
        """
        t = None
        s = self.settings
        if st.seed is not None:
            pass  # its windows follow its frames alone: only a push changes them
        elif st.playout is not None and st.emitted:
            ready = ready_end(st.num_frames, st.final, s) - st.emitted
            if ready > 0:
                dry = st.playout.dry_at(st.emitted)
                t = dry - s.low_water_samples / SAMPLE_RATE
                if s.chunk_growth > 0 and ready >= chunk_target(st.emitted, s):
                    # withheld only because the listener has much ahead (the target grows
                    # with it): due once it has ready / growth left, if not hungry before
                    t = min(t, dry - ready / s.chunk_growth / SAMPLE_RATE)
        elif st.playout is not None and ready_end(st.num_frames, st.final, s) > 0:
            # nothing sent, something ready: a first chunk withheld while the listener has
            # plenty ahead. Due once it has less than a full chunk left (early_first), or
            # once the chunk target (which follows what it has ahead) falls to what is ready.
            dry = st.playout.dry_at(0)
            t = dry - s.max_chunk_samples / SAMPLE_RATE
            ready = ready_end(st.num_frames, st.final, s, early_first=False)
            if s.chunk_growth > 0 and ready >= s.min_chunk_samples:
                t = min(t, dry - ready / s.chunk_growth / SAMPLE_RATE)
        if t != st.wake_at:  # unchanged (frames came, nothing went): its entry stands
            st.wake_at = t
            if t is not None:
                heapq.heappush(self._wakes, (t, next(self._tie), gid, st))

    def _next_wake(self) -> float | None:
        """When the first listener with withheld audio runs low, if any (stale entries of
        streams planned again or ended since are dropped from the heap's top)."""
        heap = self._wakes
        while heap and (heap[0][3].wake_at != heap[0][0]
                        or self._streams.get(heap[0][2]) is not heap[0][3]):
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def _unless_dropped(self, events: list[AudioEvent]) -> list[AudioEvent]:
        """`events` without those of generations dropped meanwhile (lock held). Their drop
        commands wait for the next drain, which emits their end where the audio the
        consumer got stops, so what is filtered here is remembered."""
        kept = []
        for e in events:
            if e.gen_id not in self._dropped:
                kept.append(e)
                continue
            self._unsent.setdefault(e.gen_id, e.sample_offset)
            if e.final:  # its end was not sent after all: the drop sends one
                self._closed.pop(e.gen_id, None)
        return kept

    def _drain(self) -> None:
        with self._lock:
            commands, self._commands = self._commands, []
            self._dropped.clear()  # their drop commands are in `commands`
        for gid, frames, final, playout, finish, seed in commands:
            self._dirty.add(gid)
            if frames is None:
                st = self._streams.pop(gid, None)
                offset = self._unsent.pop(gid, st.emitted if st is not None else 0)
                if finish is not None and gid not in self._closed:
                    self._ends.append(AudioEvent(gid, np.zeros(0, np.float32), offset,
                                                 final=True, finish=finish))
                self._remember_closed(gid)
                continue
            st = self._streams.get(gid)
            if st is None:
                if gid in self._closed:
                    log.warning("frames for ended or dropped generation %d ignored", gid)
                    continue
                st = self._streams[gid] = _Stream(seq=next(self._seq))
            if st.final:
                log.warning("frames after final for generation %d ignored", gid)
                continue
            if len(frames):
                st.frames.append(frames)
                st.num_frames += len(frames)
            st.final = final
            st.finish = finish
            if playout is not None:
                st.playout = playout
            if seed is not None:
                st.seed = seed

    def _close(self, gid: int) -> None:
        self._streams.pop(gid, None)
        self._remember_closed(gid)

    def _remember_closed(self, gid: int) -> None:
        self._closed[gid] = None
        if len(self._closed) > _CLOSED_MEMORY:
            self._closed.popitem(last=False)

    def _decode(self, jobs: list[tuple[int, _Stream, Window]],
                deadline: float) -> tuple[list[np.ndarray | None], bool]:
        """PCM of each job's kept samples, decoding equal-length windows together, and
        whether time ran out.

        Jobs come most urgent first, and calls are made in the order of their most urgent
        window (audio/calls.py; a call holding a seeded window has a fixed row count). No
        call starts after `deadline` (flusher clock): those jobs get None.
        """
        out: list[np.ndarray | None] = [None] * len(jobs)
        calls = plan_calls([(w.num_steps, w.keep.start, w.keep.stop) for _, _, w in jobs],
                           [st.seed is not None for _, st, _ in jobs],
                           self.max_decode_frames, self.settings.seeded_call_windows,
                           [st.final and w.end == st.num_frames * SAMPLES_PER_FRAME
                            for _, st, w in jobs])
        for n, call in enumerate(calls):
            if n and self.clock() >= deadline:
                return out, True
            part = call.jobs
            try:
                pcm = self._call([jobs[i] for i in part], call.lo, call.hi, call.rows)
            except Exception as exc:
                if len(part) == 1:
                    self._fail([jobs[part[0]][0]], exc)
                    continue
                # one bad window must not fail its batch-mates: decode each on its own
                for i in part:
                    out[i] = self._decode_one(jobs[i], call.lo, call.hi, call.rows)
                continue
            self.num_decoded_samples += len(part) * call.num_steps * HOP
            for row, i in enumerate(part):
                out[i] = pcm[row].copy()
        return out, False

    def _call(self, part: list[tuple[int, _Stream, Window]], lo: int, hi: int,
              rows: int | None) -> np.ndarray:
        """One SNAC call: the windows' PCM [len(part), hi - lo], padded with zero rows up to
        `rows` (audio/calls.py); a seeded window's noise comes from its own seed."""
        z = self._latents(part, rows)
        seeds = [None if st.seed is None else _window_seed(st.seed, w) for _, st, w in part]
        if any(s is not None for s in seeds):
            seeds += [None] * (z.shape[0] - len(part))
            pcm = self.codec.decode_latents(z, keep=(lo, hi), noise_seeds=seeds)
        else:
            pcm = self.codec.decode_latents(z, keep=(lo, hi))
        self.num_decode_calls += 1
        if self.on_decode is not None:
            self.on_decode(len(part))
        return pcm

    def _decode_one(self, job: tuple[int, _Stream, Window], lo: int, hi: int,
                    rows: int | None) -> np.ndarray | None:
        """A job's PCM decoded alone (after its batched call failed); None when it fails too."""
        try:
            return self._call([job], lo, hi, rows)[0].copy()
        except Exception as exc:
            self._fail([job[0]], exc)
            return None

    def _latents(self, jobs: list[tuple[int, _Stream, Window]], rows: int | None = None
                 ) -> torch.Tensor:
        """The decoder input of windows of equal num_steps, in order: one codec.latents
        call per (frames, first step) shape among them, not one per window (on a GPU each
        call is a dozen kernel launches). With `rows` (a fixed-size call, calls.py) each
        codec.latents call gets exactly that many windows, padded with code-0 windows, and
        the result has `rows` rows: SNAC's 1x1 projections are not batch-invariant either."""
        shapes: dict[tuple[int, int], list[int]] = {}
        for i, (_, _, w) in enumerate(jobs):
            shapes.setdefault((w.frame_hi - w.frame_lo, w.step_lo - w.frame_lo * 4),
                              []).append(i)
        pieces, order = [], []
        for (frames, first), members in shapes.items():
            codes = [jobs[i][1].codes()[jobs[i][2].frame_lo:jobs[i][2].frame_hi]
                     for i in members]
            if rows is not None:
                codes += [np.zeros((frames, FRAME_TOKENS), np.int64)] * (rows - len(codes))
            z = self.codec.latents(codes)[:len(members)]
            pieces.append(z[..., first:first + jobs[members[0]][2].num_steps])
            order.extend(members)
        z = pieces[0] if len(pieces) == 1 else torch.cat(pieces)
        if len(pieces) > 1:
            z = z[torch.from_numpy(np.argsort(np.asarray(order)))]
        if rows is not None and rows > len(jobs):
            z = torch.cat([z, z.new_zeros((rows - len(jobs), *z.shape[1:]))])
            self.num_padded_windows += rows - len(jobs)
        return z

    def _fail(self, gen_ids: list[int], exc: BaseException) -> None:
        """Forget generations whose decode failed; each ends with an empty final event whose
        Finish says "error" (the message from on_error), emitted by this iteration."""
        ids = sorted(set(gen_ids))
        message = None
        if self.on_error is not None:
            message = self.on_error(ids, exc)
        else:
            log.error("SNAC decode failed for generations %s: %s", ids, exc)
        for gid in ids:
            st = self._streams.pop(gid, None)
            if st is None:
                continue
            done = st.finish
            finish = Finish("error", done.num_prompt_tokens if done else 0,
                            done.num_generated if done else 0, st.num_frames,
                            message or "audio decode failed")
            self._ends.append(AudioEvent(gid, np.zeros(0, np.float32), st.emitted, final=True,
                                         finish=finish))
            self._remember_closed(gid)
