"""Sample-window arithmetic of the streaming flusher: pure integers, no torch.

A generation has received `n` frames; `emitted` samples of it went out already. SNAC's
decoder runs at one latent step per 512 samples (4 steps per frame) and is not causal:
an output sample depends on about 10 steps (2.5 frames) on either side. So each chunk is
decoded together with some left context and some lookahead, and only its own samples
are kept:

    frames    |  f0   |  f1   |  f2   |  f3   |  f4   |  f5   |  f6   |   n = 7
    steps     |. . . .|. . . .|. . . .|. . . .|. . . .|. . . .|. . . .|   1 step = 512 samples
    emitted   |=================|                                       (sent already)
    ready end                                       v  = n*2048 - lookahead
    chunk                       [start ------------ end)
    decode               [ left ctx |     chunk      | lookahead ]       step_lo .. step_hi
    keep                 <- skip -> [ kept samples  )                   start-step_lo*512 ..

  * The decoder input is cut at latent steps, so contexts are whole steps; the window's
    frames are frame_lo .. frame_hi (rounded out) and their latent is cropped to steps.
  * At the start (step 0) and at the end of a final generation (step 4n) the offline
    decode of the whole utterance sees the same zero padding, so no context is missing.
  * The first chunk: with only f0 there is no lookahead to wait for, so the head of f0
    (`first_chunk_samples`) goes out at once; the next chunk starts where it stopped.
    Unless the listener has plenty to play before it needs this generation (a later
    segment, `ahead` >= max_chunk_samples): then its first chunk is an ordinary one,
    decoded with lookahead (better audio) and as large as the target allows.
  * Chunk sizes follow what the listener has to play: max(emitted, ahead), so a later
    segment whose listener is seconds ahead goes out in large chunks from the start.

A seeded session's windows (plan_fixed_windows) instead depend on its frames alone: the
chunk boundaries are fixed (the head of frame 0, then about chunk_target of what was sent,
ending where the lookahead ends on a frame boundary: fixed_chunk_end), and a window goes
only once its whole lookahead exists (or the generation ended), whatever the listener or
the flusher's pacing. Its audio is then the same every time the same tokens come, at the
price of chunks that do not follow the listener's buffer; ending each one when a frame
completes keeps a loaded server's seeded listeners fed (with chunk ends at the target
alone, the chunk after the first would wait for a third frame, and its listener would
underrun right after the first chunk).
"""

from __future__ import annotations

from typing import NamedTuple

from orpheus_svc.audio.settings import FRAME, HOP, FlusherSettings

STEPS_PER_FRAME = FRAME // HOP


class Window(NamedTuple):
    """Decode latent steps [step_lo, step_hi), keep absolute samples [start, end).

    A NamedTuple, not a dataclass: the flusher makes one per window per iteration, and a
    tuple is built several times faster (immutable all the same).
    """

    start: int
    end: int
    step_lo: int
    step_hi: int

    @property
    def num_steps(self) -> int:
        return self.step_hi - self.step_lo

    @property
    def frame_lo(self) -> int:
        return self.step_lo // STEPS_PER_FRAME

    @property
    def frame_hi(self) -> int:
        return -(-self.step_hi // STEPS_PER_FRAME)

    @property
    def keep(self) -> slice:
        """The kept samples inside the decoded window's output."""
        base = self.step_lo * HOP
        return slice(self.start - base, self.end - base)


def ready_end(num_frames: int, final: bool, s: FlusherSettings, early_first: bool = True) -> int:
    """Absolute sample up to which audio may be emitted now (`early_first`: the head of
    frame 0 may go before its lookahead exists)."""
    total = num_frames * FRAME
    if final:
        return total
    if num_frames == 0:
        return 0
    if not early_first:
        return max(total - s.lookahead_samples, 0)
    return max(total - s.lookahead_samples, min(s.first_chunk_samples, total))


def early_first(emitted: int, ahead: int, s: FlusherSettings) -> bool:
    """Does this generation's first chunk go as soon as it exists? Yes unless it was sent
    already or the listener has at least a full chunk to play before it needs it."""
    return emitted == 0 and ahead < s.max_chunk_samples


def chunk_target(emitted: int, s: FlusherSettings) -> int:
    """New samples a (non-first, non-last) chunk waits for: grows with the audio sent."""
    return int(min(s.max_chunk_samples, max(s.min_chunk_samples, emitted * s.chunk_growth)))


def window_for(start: int, end: int, num_frames: int, s: FlusherSettings) -> Window:
    lo = max(0, start // HOP - s.left_context_samples // HOP)
    hi = min(num_frames * STEPS_PER_FRAME, -(-end // HOP) + s.lookahead_samples // HOP)
    return Window(start, end, lo, hi)


def plan_windows(num_frames: int, final: bool, emitted: int, s: FlusherSettings,
                 hungry: bool = False, ahead: int = 0) -> list[Window]:
    """The windows to decode now for one generation (empty: nothing is due yet).

    `hungry`: the listener is about to run dry (the flusher's playout estimate is below
    low_water_samples), so whatever is ready goes now, however small.
    `ahead`: samples the listener has to play before it runs out of what this generation
    sent (for a later segment: with the audio before it); 0 when unknown.
    Ready audio longer than max_chunk_samples is cut into pieces of that size, so a
    flusher that fell behind catches up in equal, batchable windows.
    """
    early = early_first(emitted, ahead, s)
    end = ready_end(num_frames, final, s, early)
    if end <= emitted:
        return []
    # The first chunk goes as soon as anything is ready (time to first audio) unless the
    # listener has plenty ahead; the last one whatever its size; the ones between wait
    # until they are worth a decode, unless the listener needs them now.
    if (not (final or hungry or early)
            and end - emitted < chunk_target(max(emitted, ahead), s)):
        return []
    windows = []
    start = emitted
    while start < end:
        stop = min(end, start + s.max_chunk_samples)
        windows.append(window_for(start, stop, num_frames, s))
        start = stop
    return windows


def fixed_chunk_end(start: int, s: FlusherSettings) -> int:
    """Where a seeded session's chunk that starts at `start` ends: at a point whose lookahead
    ends on a frame boundary (n * FRAME - lookahead), so the chunk is due the moment a frame
    completes, never a part of a frame later; the last such point within chunk_target of
    the start, or the first one after the start when none is.

        frames     |   f0   |   f1   |   f2   |   f3   |
        ends             ^1536    ^3584    ^5632        (lookahead 2560: 1.25 frames)
    """
    la = s.lookahead_samples
    n = (start + chunk_target(start, s) + la) // FRAME  # the last aligned end within target
    end = n * FRAME - la
    if end <= start:
        end = (-(-(start + la + 1) // FRAME)) * FRAME - la  # the first one past the start
    return end


def plan_fixed_windows(num_frames: int, final: bool, emitted: int,
                       s: FlusherSettings) -> list[Window]:
    """The windows due now for a generation whose audio must not depend on timing (a
    seeded session): the same frames always give the same windows (module docstring).

        boundaries  0 | head of f0 | fixed_chunk_end | ... | end of the last frame
        due         a window whose lookahead (or the generation's end) has arrived
    """
    total = num_frames * FRAME
    steps = num_frames * STEPS_PER_FRAME
    windows = []
    start = emitted
    while start < total:
        if start == 0 and s.first_chunk_samples:
            end = min(s.first_chunk_samples, total)
            # frame 0 alone, never more: how many frames exist when it is planned varies
            windows.append(Window(0, end, 0, STEPS_PER_FRAME))
            start = end
            continue
        end = min(fixed_chunk_end(start, s), total)
        lookahead_end = -(-end // HOP) + s.lookahead_samples // HOP
        if not final and (end == total or lookahead_end > steps):
            break  # its lookahead has not arrived yet
        windows.append(window_for(start, end, num_frames, s))
        start = end
    return windows
