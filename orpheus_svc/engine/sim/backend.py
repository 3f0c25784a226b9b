"""The `sim` backend: a GPU timing model with no model compute, for load-testing the real server.

Everything around the model is real: EngineLoop, the scheduler, the flusher's bookkeeping,
the gRPC server. Only two things are simulated:

  * SimBackend.step(plan): the tokens come from a seeded RNG that follows the audio grammar,
    and the step lasts t(batch, context) from a GpuProfile (engine/sim/profiles.py, derived
    in docs/capacity.md).
  * SimCodec: the flusher's codec; a decode call costs the profile's SNAC time and returns
    low-level noise of exactly the right length.

Step pacing. A GPU runs the next step while the host finishes the previous one's
bookkeeping (TensorRT-LLM's overlap scheduler does this), so host time up to the step's
own length is hidden and host time beyond it is what the GPU waits for:

    step k:      |<-------- d_k -------->|                         modelled GPU time
    host:        |  update, schedule ... |--step()--| sleep  |      Python, then sleep
                 ^ last_end              ^ now      end = max(last_end + d, now)

    period = max(d, host time): the step period matches the model whenever the host keeps
    up, and becomes the host's own time when it does not (counted in stats()["host_bound_steps"]).

    The host time has two parts: how late the engine thread got back from the sleep (the OS
    or the GIL kept it: "late_wake_s", "late_wakes" over LATE_WAKE_S) and its own work after
    that. Of a host-bound step's excess, the part the late wake-up caused (the excess minus
    what the work alone would have overrun) goes to "host_excess_wake_s", and a step that
    the work alone would not have made late counts in "host_bound_by_wake_steps".

After an idle spell (no live generation when step() is called) the step starts now:
end = now + d. All time goes through the injectable `clock` and `sleep`.

Utterance lengths. Each generation gets its whole token stream when it is first seen:
frames ~ expected_frames x lognormal(0, length_sigma) (expected_frames is ~15 chars/s of the
segment's text, set by the runtime), at least 1, then the stop id; max_tokens cuts it short
(the scheduler then ends it with "length"). Codes are uniform; the stream depends only on
the generation's seed, never on batching.

Fault injection (engine.sim_faults; tests only, never for serving): SimFaults names
generations by their seed (a client sets it in SamplingOptions; segment i of a session
runs with seed + i) and makes the backend raise when such a generation reaches a token,
makes a step slow, or makes the codec fail on that generation's audio. EngineLoop must
then fail only the targeted rows (tests/engine_sim/test_faults.py, tests/e2e).
"""

from __future__ import annotations

import bisect
import json
import logging
import math
import os
import threading
import time
from typing import Callable, Sequence

import numpy as np

from orpheus_svc.core.grammar import position_id_range
from orpheus_svc.core.prefix_book import PrefixBook
from orpheus_svc.core.prompt import TYPICAL_CHARS_PER_SECOND
from orpheus_svc.core.step import BackendCapabilities, StepPlan, StepResult, StepRow
from orpheus_svc.core.tokens import (
    CODES_PER_POSITION,
    END_OF_SPEECH_ID,
    FRAME_SECONDS,
    FRAME_TOKENS,
)

from orpheus_svc.engine.sim.codec import SimCodec
from orpheus_svc.engine.sim.encode import SIM_CHARS_PER_TOKEN
from orpheus_svc.engine.sim.faults import POISON_CODES, SimFaults
from orpheus_svc.engine.sim.profiles import GpuProfile
from orpheus_svc.threads import os_named

log = logging.getLogger(__name__)

_PROMPT_OVERHEAD_TOKENS = 8  # start of human, BOS, "tara:", end of text/human, start of AI/speech
_POSITION_OFFSETS = np.array([position_id_range(p)[0] for p in range(FRAME_TOKENS)], np.int64)

#: A return from the step's sleep later than this counts in stats()["late_wakes"] (on an idle
#: core a return is typically 0.1-0.2 ms late); every lateness adds to "late_wake_s".
LATE_WAKE_S = 0.001
# Step-period histogram (stats()["step_hist"]): bucket i counts periods up to
# STEP_BUCKET_FIRST_S x STEP_BUCKET_RATIO**i (5% apart, 0.1 ms to ~12 s; the last counts the rest).
STEP_BUCKET_FIRST_S, STEP_BUCKET_RATIO = 1e-4, 1.05
STEP_BUCKETS_S = tuple(STEP_BUCKET_FIRST_S * STEP_BUCKET_RATIO ** i for i in range(241))
# Set in the server's environment, the sim writes stats() as JSON to this file 5 times a second,
# so a benchmark on the same machine can tell whether the GPU model or the host set the pace.
STATS_FILE_ENV = "ORPHEUS_SIM_STATS_FILE"


_STOP_STEP = (END_OF_SPEECH_ID,)


def pace_step(last_end: float | None, now: float, d: float) -> tuple[float, float]:
    """The sim's step rule (module docstring): a step called at `now` lasting `d` ends d after
    the last step ended, or d after `now` after an idle spell (`last_end` None); called
    after that end, the host set the pace and the step ends now. Returns (end, how far past
    it the call came: 0 when the host kept up)."""
    if last_end is None:
        return now + d, 0.0
    end = last_end + d
    return (now, now - end) if now > end else (end, 0.0)


class SimBackend:
    """Backend protocol (engine/loop.py) with modelled step times and grammar-legal tokens."""

    def __init__(self, profile: GpuProfile, num_slots: int, max_seq_len: int, *,
                 length_sigma: float = 0.2,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep,
                 faults: SimFaults | None = None, max_adapters: int = 0,
                 lora_rank: int = 0, never_stop: bool = False,
                 prefix_pool_tokens: int = 0,
                 prefix_budget: str = "engine.prefix_pool_mb") -> None:
        """`max_adapters`, `lora_rank`: the LoRA pool a real engine would hold
        (engine.max_adapters, engine.max_lora_rank); each step pays its modelled cost
        (GpuProfile.lora_seconds) for the rows on adapters. `never_stop`: every stream is
        audio up to its max_tokens, as random weights give (they never sample the stop id):
        the load of a GPU run with a random checkpoint."""
        self.never_stop = never_stop
        self.faults = faults or SimFaults()
        self.lora_rank = lora_rank if max_adapters else 0
        self.profile = profile
        self.num_slots = num_slots
        self.max_seq_len = max_seq_len
        self.length_sigma = length_sigma
        # retry_safe: step() changes nothing before it can raise; EngineLoop may re-run parts
        self.capabilities = BackendCapabilities(name="sim", num_slots=num_slots,
                                                max_seq_len=max_seq_len, retry_safe=True,
                                                max_adapters=max_adapters if lora_rank else 0,
                                                max_lora_rank=self.lora_rank,
                                                prefix_pool_tokens=prefix_pool_tokens)
        # the prefix pool a real engine would hold (engine.prefix_pool_mb): which prefixes
        # it has; a step pays the copy of a held one instead of its prefill
        self.prefixes = PrefixBook(prefix_pool_tokens, prefix_budget)
        self._clock = clock
        self._sleep = sleep
        # what each LoRA pool slot holds (write_adapter), as a real engine's pool would:
        # the adapter's directory and rank; a slot not here is clear
        self.pool: dict[int, tuple[str, int]] = {}
        # Live generations' whole token streams, one row per KV slot (`_owner`: whose
        # stream a row holds, -1: none), so a step reads every decode row's next token in
        # one array operation: the sim's host side is the simulated GPU's, not the server's,
        # and must not cost the server's core more than a real backend's would.
        self._table = np.zeros((num_slots, 256), np.int32)  # widened for longer streams
        self._length = np.zeros(num_slots, np.int64)
        self._owner = np.full(num_slots, -1, np.int64)
        self._slot_of: dict[int, int] = {}  # live gen_id -> its slot
        self._last_end = 0.0
        # Engine thread only; read them as a (racy, monotone) snapshot.
        self.counters = dict(steps=0, rows=0, prefill_rows=0, prefill_tokens=0,
                             modelled_s=0.0, host_bound_steps=0, host_excess_s=0.0,
                             idle_starts=0, peak_kv_tokens=0, max_host_excess_s=0.0,
                             late_wakes=0, late_wake_s=0.0, max_late_wake_s=0.0,
                             host_bound_by_wake_steps=0, host_excess_wake_s=0.0)
        self.codec: SimCodec | None = None  # build_sim_backend sets it when the codec is simulated
        self._woke_late = 0.0  # how late the engine thread got back from the last step's sleep
        # The latest steps whose host time overran the modelled step by > 20 ms:
        # (monotonic time, overrun s, rows), for correlating stalls with what else ran.
        self.slow_steps: list[tuple[float, float, int]] = []
        # Step periods while busy (one step's return to the next's: the modelled time, or the
        # host's when it is slower), counted per STEP_BUCKETS_S bucket. Timed around step()
        # (_timed_step), so step() itself stays as it is.
        self.step_hist = [0] * (len(STEP_BUCKETS_S) + 1)
        self.max_step_s = 0.0
        self._last_return: float | None = None
        self._untimed_step, self.step = self.step, self._timed_step
        if os.environ.get(STATS_FILE_ENV):
            threading.Thread(target=os_named(self._write_stats_file),
                             args=(os.environ[STATS_FILE_ENV],), name="sim-stats",
                             daemon=True).start()
        need = profile.weight_bytes + profile.kv_bytes(num_slots * max_seq_len)
        if need > profile.memory_bytes:
            log.warning(
                "sim %s: %d slots x %d tokens of FP16 KV + weights = %.1f GB, more than the "
                "%.0f GB of a %s; a paged KV cache (TensorRT-LLM) only needs the live tokens "
                "(stats()['peak_kv_tokens']), a preallocated slot pool would not fit",
                profile.name, num_slots, max_seq_len, need / 1e9, profile.memory_bytes / 1e9,
                profile.gpu)

    # -- Backend protocol ------------------------------------------------------------------

    def release(self, gen_ids: Sequence[int]) -> list[int]:
        for gen_id in gen_ids:
            self._forget(gen_id)
        return list(gen_ids)

    def _forget(self, gen_id: int) -> None:
        slot = self._slot_of.pop(gen_id, None)
        if slot is not None and self._owner[slot] == gen_id:
            self._owner[slot] = -1

    def _store(self, row: StepRow) -> list[int]:
        """Draw `row`'s whole stream into its slot's table row; returns it."""
        stream = self.token_stream(row)
        n, width = len(stream), self._table.shape[1]
        if n > width:
            wider = np.zeros((self.num_slots, max(n, 2 * width)), np.int32)
            wider[:, :width] = self._table
            self._table = wider
        old = int(self._owner[row.slot])
        if old >= 0 and old != row.gen_id:
            self._slot_of.pop(old, None)
        self._table[row.slot, :n] = stream
        self._length[row.slot] = n
        self._owner[row.slot] = row.gen_id
        self._slot_of[row.gen_id] = row.slot
        return stream

    def close(self) -> None:
        """Nothing to stop."""

    def step(self, plan: StepPlan) -> StepResult:
        if self.faults:
            self.faults.before_step(plan, self._sleep)
        now = self._clock()
        busy = bool(self._slot_of)
        tokens: dict[int, tuple[int]] = {}
        ended: list[int] = []  # the scheduler finishes these with this step's token
        prefill_tokens = prefill_sq = 0
        copied = 0  # prefix tokens copied from the pool instead of computed
        for g in plan.prefill:
            stream = self._store(g)
            n = len(g.request.prompt_ids)
            held = g.request.prefix_len if g.request.prefix_len and \
                g.request.prompt_ids[:g.request.prefix_len] in self.prefixes else 0
            copied += held
            prefill_tokens += n - held
            prefill_sq += n * n - held * held  # the turn's rows attend to the prefix too
            tokens[g.gen_id] = (stream[0],) if stream else _STOP_STEP
            if len(stream) <= 1:
                ended.append(g.gen_id)
        # The decode rows (every live row, every step) in array operations, no Python per
        # row. A stream ends with the stop id or is cut at max_tokens, so its last token is
        # the last step.
        decode = plan.decode
        decode_tokens = None
        context = 0
        if len(decode):
            slots, i = decode.slots, decode.num_generated
            stale = self._owner[slots] != decode.gen_ids
            if stale.any():  # not seen before (e.g. a backend swap); same stream anyway
                for k in np.flatnonzero(stale).tolist():
                    self._store(decode[k])
            length = self._length[slots]
            last = self._table.shape[1] - 1
            decode_tokens = np.where(i < length, self._table[slots, np.minimum(i, last)],
                                     END_OF_SPEECH_ID)
            context = int(decode.position.sum()) + len(decode)  # prompt + tokens so far
            done = i + 1 >= length
            if done.any():
                ended.extend(decode.gen_ids[done].tolist())
        for gid in ended:
            self._forget(gid)
        d = self.profile.step_seconds(len(decode), context, len(plan.prefill),
                                      prefill_tokens, prefill_sq)
        if self.lora_rank:
            d += self._lora_seconds(plan)
        if copied:
            d += self.profile.prefix_copy_seconds(copied)
        c = self.counters
        end, over = pace_step(self._last_end if busy else None, now, d)
        if busy:
            if over > 0:
                c["host_bound_steps"] += 1
                c["host_excess_s"] += over
                c["max_host_excess_s"] = max(c["max_host_excess_s"], over)
                # The host's time since the last step ended = the late wake-up + its work.
                # Without the late wake-up it would have been over by max(0, work - d) only.
                work = now - self._last_end - self._woke_late
                by_wake = over - max(0.0, work - d)
                c["host_excess_wake_s"] += by_wake
                if work <= d:
                    c["host_bound_by_wake_steps"] += 1
                if over > 0.02:
                    self.slow_steps = self.slow_steps[-99:] + [
                        (now, over, len(plan.prefill) + len(decode))]
        else:
            c["idle_starts"] += 1
        c["steps"] += 1
        c["rows"] += len(plan.prefill) + len(decode)
        c["prefill_rows"] += len(plan.prefill)
        c["prefill_tokens"] += prefill_tokens
        c["modelled_s"] += d
        c["peak_kv_tokens"] = max(c["peak_kv_tokens"], context + prefill_tokens)
        self._last_end = end
        wait = end - self._clock()
        self._woke_late = 0.0
        if wait > 0:
            self._sleep(wait)
            # Back later than asked: the OS or the GIL kept this thread (the wait for the
            # GIL after a blocking call is taken before the call returns to Python).
            late = self._clock() - end
            if late > 0:
                self._woke_late = late
                c["late_wake_s"] += late
                c["max_late_wake_s"] = max(c["max_late_wake_s"], late)
                if late > LATE_WAKE_S:
                    c["late_wakes"] += 1
        return StepResult(tokens=tokens, decode_tokens=decode_tokens)

    def add_prefix(self, ids: Sequence[int]) -> None:
        """Backend.add_prefix: the pool holds `ids` from now on (PrefixPoolFull when it does
        not fit), after the modelled time of its prefill, as a real engine spends it
        between two steps."""
        fresh = ids not in self.prefixes
        self.prefixes.place(ids)
        if fresh:
            n = len(ids)
            self._sleep(self.profile.step_seconds(0, 0, 1, n, n * n))

    def drop_prefix(self, ids: Sequence[int]) -> None:
        self.prefixes.remove(ids)

    def holds_prefix(self, ids: Sequence[int]) -> bool:
        return ids in self.prefixes

    def write_adapter(self, slot: int, adapter) -> None:
        """Backend.write_adapter: the sim keeps no weights, only what each slot holds
        (`pool`), so an adapter can be loaded and unloaded while it serves."""
        if not 0 <= slot < self.capabilities.max_adapters:
            raise IndexError(f"adapter slot {slot} outside 0..{self.capabilities.max_adapters - 1}")
        if adapter is None:
            self.pool.pop(slot, None)
        else:
            self.pool[slot] = (str(adapter.path), adapter.spec.r)

    def _lora_seconds(self, plan: StepPlan) -> float:
        """The modelled LoRA cost of a step: its distinct adapters and the tokens on them."""
        used = plan.decode.adapter[plan.decode.adapter >= 0] if len(plan.decode) \
            else np.zeros(0, np.int64)
        tokens = len(used)
        names = set(used.tolist())
        for g in plan.prefill:
            if g.request.adapter >= 0:
                names.add(g.request.adapter)
                tokens += len(g.request.prompt_ids)
        return self.profile.lora_seconds(len(names), tokens, self.lora_rank)

    def _timed_step(self, *args, **kwargs) -> StepResult:
        busy = bool(self._slot_of)
        result = self._untimed_step(*args, **kwargs)
        now = self._clock()
        if busy and self._last_return is not None:
            period = now - self._last_return
            self.step_hist[bisect.bisect_left(STEP_BUCKETS_S, period)] += 1
            self.max_step_s = max(self.max_step_s, period)
        self._last_return = now
        return result

    def _write_stats_file(self, path: str, every_s: float = 0.2) -> None:
        """STATS_FILE_ENV's writer thread: stats() plus the wall time, replaced atomically."""
        tmp = f"{path}.{os.getpid()}.tmp"
        while True:
            try:
                doc = {**self.stats(), "profile": self.profile.name, "pid": os.getpid(),
                       "written_at": time.time()}
                with open(tmp, "w") as f:
                    json.dump(doc, f)
                os.replace(tmp, path)
            except (OSError, RuntimeError, ValueError) as exc:
                log.warning("sim stats file %s: %s", path, exc)
                return
            time.sleep(every_s)

    # -- tokens ----------------------------------------------------------------------------

    def num_frames(self, g: StepRow, rng: np.random.Generator) -> int:
        """Sampled utterance length in frames (>= 1), before the max_tokens cut."""
        expected = g.request.expected_frames
        if expected <= 0:  # no estimate from the caller: infer the text length from the prompt
            prompt_tokens = len(g.request.prompt_ids)
            chars = max(1, prompt_tokens - _PROMPT_OVERHEAD_TOKENS) * SIM_CHARS_PER_TOKEN
            expected = chars / TYPICAL_CHARS_PER_SECOND / FRAME_SECONDS
        factor = math.exp(rng.normal(0.0, self.length_sigma)) if self.length_sigma > 0 else 1.0
        return max(1, round(expected * factor))

    def token_stream(self, g: StepRow) -> list[int]:
        """The generation's whole output: frames x 7 legal audio ids, then the stop id,
        truncated to max_tokens. Depends only on g.seed and the request."""
        rng = np.random.default_rng(g.seed)
        frames = self.num_frames(g, rng)
        if self.never_stop:
            frames = -(-max(g.request.max_tokens, 0) // FRAME_TOKENS)
        codes = rng.integers(0, CODES_PER_POSITION, size=(frames, FRAME_TOKENS), dtype=np.int64)
        if g.seed in self.faults.codec_error:
            codes[:] = POISON_CODES  # SimCodec fails on these windows
        ids = (codes + _POSITION_OFFSETS).reshape(-1).tolist()
        ids.append(END_OF_SPEECH_ID)
        return ids[:max(g.request.max_tokens, 0)]

    def stats(self) -> dict:
        """Counters plus derived figures: mean batch, fraction of steps where the host was slower."""
        c = dict(self.counters)
        c["live_generations"] = len(self._slot_of)
        c["mean_batch"] = c["rows"] / c["steps"] if c["steps"] else 0.0
        c["host_bound_fraction"] = c["host_bound_steps"] / c["steps"] if c["steps"] else 0.0
        c["peak_kv_gb"] = self.profile.kv_bytes(c["peak_kv_tokens"]) / 1e9
        c["step_hist"] = {i: n for i, n in enumerate(list(self.step_hist)) if n}
        c["step_buckets"] = {"first_s": STEP_BUCKET_FIRST_S, "ratio": STEP_BUCKET_RATIO,
                             "count": len(STEP_BUCKETS_S)}
        c["max_step_s"] = self.max_step_s
        if self.codec is not None:  # the sim codec's own counters (flusher thread: racy, monotone)
            c["codec_calls"] = self.codec.num_calls
            c["codec_frames"] = round(self.codec.num_frames, 1)
            c["codec_modelled_s"] = round(self.codec.modelled_s, 4)
        return c


