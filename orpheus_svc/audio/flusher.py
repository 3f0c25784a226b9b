"""Streaming SNAC flusher: frames in (from the engine thread), PCM events out, on its own thread.

Each iteration: drain the commands pushed since the last one into the streams
(audio/streams.py), plan the due windows (audio/windows.py) of the streams whose plan can
have changed, decode them (audio/decoder.py: windows of equal length together, in as few
SNAC calls as max_decode_frames allows), and hand the events of the iteration to the sink:
first audio (a generation's first window) in one call as soon as it is decoded, the rest in
one call after. Windows are decoded most urgent first (first chunks, then the listeners with
the least audio buffered), and an iteration starts no SNAC call after max_iteration_s: what
is left waits for the next iteration, which follows at once. push_many() (once per engine
step), push() and drop() only append to a queue under a lock, so the producer never waits
for a decode. How much audio a listener has buffered comes from the scheduler's playout
clock (a PlayoutSnapshot, core/playout.py, pushed with the frames) and the samples sent here.

A generation pushed with a seed (a seeded session's) decodes the same tokens to the same
PCM every time, whatever else is decoded: its windows follow its frames alone (windows.py
plan_fixed_windows), share calls of a row count fixed for their shape with other windows
(a call's rows differ in the last float bits by its size: audio/calls.py) and draw SNAC's
noise from a seed of the generation's and the window's (decoder.py, codec.py).

Guarantees per generation: offsets are contiguous from 0; F frames give exactly F*2048
samples; the last event has final=True (a generation with no frames gets one empty final
event) and carries the Finish pushed with the last frames; after drop() returns, no sink
call that starts later carries that generation, except, when drop() was given a Finish,
one empty final event with it (unless the generation had ended already). So each
generation the engine feeds ends with exactly one final event, from this thread, after
all of its audio (the engine thread never emits a generation's end itself).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Sequence

import numpy as np
import torch

from orpheus_svc.audio.decoder import Decoder, DecodeJob
from orpheus_svc.audio.settings import FlusherSettings
from orpheus_svc.audio.streams import Stream, Streams
from orpheus_svc.audio.windows import Window, plan_fixed_windows, plan_windows
from orpheus_svc.core.events import AudioEvent, Finish, FramePush
from orpheus_svc.core.playout import PlayoutSnapshot
from orpheus_svc.core.tokens import CODES_PER_POSITION, FRAME_TOKENS, SAMPLES_PER_FRAME
from orpheus_svc.threads import os_named

log = logging.getLogger(__name__)

AudioSink = Callable[[Sequence[AudioEvent]], None]
ErrorHandler = Callable[[Sequence[int], BaseException], str | None]  # -> the client message


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
        self.sink = sink
        self.on_error = on_error
        self._decoder = Decoder(codec, settings, clock, on_decode)
        self._name = name
        self._lock = threading.Condition(threading.Lock())
        # (gen_id, frames, final, playout, finish, seed); frames None = drop
        self._commands: list[tuple[int, np.ndarray | None, bool, PlayoutSnapshot | None,
                                   Finish | None, int | None]] = []
        self._dropped: set[int] = set()  # dropped since the last drain: filter in-flight output
        self._ends: list[AudioEvent] = []  # final events of dropped/failed generations, to emit
        self._unsent: dict[int, int] = {}  # dropped gen -> offset of its first filtered event
        self._streams = Streams(settings)
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._wake_at: float | None = None  # clock time a withheld chunk becomes due
        self.backlog = False  # the last iteration left due windows undecoded (time limit)
        self.num_iterations = 0  # flusher thread only; read it for metrics, never reset it

    @property
    def max_decode_frames(self) -> int:
        """Frames per SNAC call (FlusherSettings.max_decode_frames, else the codec's choice)."""
        return self._decoder.max_decode_frames

    @property
    def num_decode_calls(self) -> int:
        return self._decoder.num_decode_calls

    @property
    def num_decoded_samples(self) -> int:
        """Window lengths decoded, context included."""
        return self._decoder.num_decoded_samples

    @property
    def num_padded_windows(self) -> int:
        """Zero rows added to fixed-size calls (audio/calls.py)."""
        return self._decoder.num_padded_windows

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
        stream = None  # off the engine's stream: the codec's own (low priority), else a new one
        if self.codec.device.type == "cuda":
            stream = getattr(self.codec, "stream", None) or torch.cuda.Stream(self.codec.device)
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
        due: list[tuple[int, Stream, list[Window]]] = []
        planned = self._streams.due(now)
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
            pcm, self.backlog = self._decoder.decode(
                [DecodeJob(gid, w, st.codes(), st.seed, st.ends_with(w)) for gid, st, w in phase],
                deadline, self._fail)
            for (gid, st, w), audio in zip(phase, pcm):
                if gid not in self._streams:  # its decode failed
                    continue
                if audio is None or gid in cut:  # out of time: it and what follows wait
                    cut.add(gid)
                    continue
                is_last = st.ends_with(w)
                events.append(AudioEvent(gid, audio, w.start, final=is_last,
                                         finish=st.finish if is_last else None))
                st.emitted = w.end
            if k + 1 < len(phases):
                sent += self._emit(events)
                events = []
        events += self._ends  # failed decodes (_fail)
        self._ends = []
        self._wake_at = self._streams.planned(planned, cut)
        return sent + self._emit(events)

    def _emit(self, events: list[AudioEvent]) -> int:
        """Close the generations that end in `events`, and hand the sink those not dropped
        meanwhile; returns how many went."""
        for event in events:
            if event.final:
                self._streams.close(event.gen_id)
        with self._lock:
            events = self._unless_dropped(events)
        if events:
            self.sink(events)
        return len(events)

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
                self._streams.forget_closed(e.gen_id)
        return kept

    def _drain(self) -> None:
        with self._lock:
            commands, self._commands = self._commands, []
            self._dropped.clear()  # their drop commands are in `commands`
        for gid, frames, final, playout, finish, seed in commands:
            if frames is None:
                ended = self._streams.is_closed(gid)
                st = self._streams.close(gid)
                offset = self._unsent.pop(gid, st.emitted if st is not None else 0)
                if finish is not None and not ended:
                    self._ends.append(AudioEvent(gid, np.zeros(0, np.float32), offset,
                                                 final=True, finish=finish))
                continue
            st = self._streams.open(gid)
            if st is None:
                log.warning("frames for ended or dropped generation %d ignored", gid)
                continue
            if st.final:
                log.warning("frames after final for generation %d ignored", gid)
                continue
            st.add(frames, final, playout, finish, seed)

    def _fail(self, gid: int, exc: BaseException) -> None:
        """Forget a generation whose decode failed; it ends with an empty final event whose
        Finish says "error" (the message from on_error), emitted by this iteration."""
        message = None
        if self.on_error is not None:
            message = self.on_error([gid], exc)
        else:
            log.error("SNAC decode failed for generations %s: %s", [gid], exc)
        st = self._streams.get(gid)
        if st is None:
            return
        done = st.finish
        finish = Finish("error", done.num_prompt_tokens if done else 0,
                        done.num_generated if done else 0, st.num_frames,
                        message or "audio decode failed")
        self._ends.append(AudioEvent(gid, np.zeros(0, np.float32), st.emitted, final=True,
                                     finish=finish))
        self._streams.close(gid)
