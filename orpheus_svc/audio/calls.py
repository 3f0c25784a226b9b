"""Which windows the flusher decodes together: pure planning, no torch (audio/flusher.py runs it).

Windows of the same shape (latent steps, kept samples) share a SNAC call, up to `per_call`
of them (max_decode_frames x 4 / steps). A seeded session's window must decode to the same
bits whatever shares its call, and a SNAC call on the CPU is not batch-invariant:
oneDNN's convolutions give a row other bits at other batch sizes (measured: B = 1, even B
and odd B >= 3 are three classes with 2 threads; B <= 12 and B >= 16 with one), though the
same at any row of a call of the same size. So a call that holds a seeded window always has
exactly `fixed_rows(per_call, seeded_rows)` rows, for its shape, whatever is due:

    shape (steps, keep)   seeded windows s1..s5, unseeded u1..u9, per_call 8, fixed rows 4
    seeded calls          [s1 s2 s3 s4]  [s5 u1 u2 u3]       <- exactly 4 rows each; spare
                                                                rows take unseeded windows,
                                                                then zero rows (padding)
    unseeded calls        [u4 u5 u6 u7 u8 u9]                <- as before: up to per_call

Seeded windows thus share calls (a seeded session costs no call of its own), and the rows
padding wastes are at most fixed_rows - 1 per shape and iteration.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence


class Call(NamedTuple):
    """One SNAC call: job indices (most urgent first), their shape, and the row count the
    call must have (None: exactly the jobs; else pad with zero rows up to it)."""

    jobs: list[int]
    num_steps: int
    lo: int
    hi: int
    rows: int | None


def fixed_rows(per_call: int, seeded_rows: int) -> int:
    """The row count of every call that holds a seeded window of a shape: a function of
    the shape alone (per_call depends on its steps), never of what is due."""
    return max(1, min(per_call, seeded_rows))


def plan_calls(shapes: Sequence[tuple[int, int, int]], seeded: Sequence[bool],
               max_frames: int, seeded_rows: int,
               alone: Sequence[bool] | None = None) -> list[Call]:
    """The calls for jobs (in urgency order) of the given (num_steps, lo, hi) shapes, in the
    order of their most urgent job. `max_frames`: frames per call (the flusher's
    max_decode_frames); `seeded_rows`: the cap on a seeded call's rows (module docstring).
    `alone`: seeded jobs decoded in a call of one row, their own (a generation's last
    window, whose length is its own: nothing would share its call, so it pays no padding)."""
    groups: dict[tuple[int, int, int], list[int]] = {}
    for i, shape in enumerate(shapes):
        groups.setdefault(shape, []).append(i)
    calls = []
    for (num_steps, lo, hi), members in groups.items():
        per_call = max(1, (max_frames * 4) // num_steps)
        single = [i for i in members if seeded[i] and alone is not None and alone[i]]
        fixed = [i for i in members if seeded[i] and i not in single]
        free = [i for i in members if not seeded[i]]
        calls.extend(Call([i], num_steps, lo, hi, 1) for i in single)
        if fixed:
            rows = fixed_rows(per_call, seeded_rows)
            for k in range(0, len(fixed), rows):
                part = fixed[k:k + rows]
                spare = rows - len(part)
                part, free = part + free[:spare], free[spare:]
                calls.append(Call(part, num_steps, lo, hi, rows))
        calls.extend(Call(free[k:k + per_call], num_steps, lo, hi, None)
                     for k in range(0, len(free), per_call))
    calls.sort(key=lambda call: min(call.jobs))  # by the call's most urgent window
    return calls
