"""The trtllm backend's step logic: our scheduler decides who runs, TensorRT-LLM batches.

TensorRT-LLM runs its own in-flight batching, so one EngineLoop step here is not one
forward pass (capabilities.streams_deltas). release(gen_ids), called by EngineLoop for every
generation our scheduler ended (stop, length, error, cancel), aborts its TensorRT-LLM
request if that still runs. A request ends in TensorRT-LLM after our scheduler ended it, so
the backend confirms each end (capabilities.confirms_release, StepResult.freed) and the
scheduler's slot pool keeps the slot taken until then: in-flight requests never exceed the
slots, with no second gate here. step(plan) does three things, in this order:

    1. retire   forget released streams once TensorRT-LLM confirmed their end (or the
                confirmation is overdue) and report them freed; report streams that
                TensorRT-LLM ended but our scheduler did not (early length limit, timeout,
                foreign cancel) as errors, so no generation is left waiting for tokens
                that will never come
    2. submit   newly admitted generations (plan.prefill, in the scheduler's priority order:
                TTFB first); the scheduler admitted them into slots it knows are free.
                max_tokens is already fitted to the slot (the scheduler does it at
                admission: core.prompt.fit_to_slot), so TensorRT-LLM's own check of
                prompt + max_tokens against max_seq_len never refuses a request; a prompt
                that does not fit ends the generation with the reason without reaching
                TensorRT-LLM (EngineLoop's admission has already refused it with
                INVALID_ARGUMENT). A client's seed where TensorRT-LLM would ignore it
                (seed_refusal) ends the generation with that reason too: the edge refuses
                it first (runtime.FrontRuntime.request), this catches any other caller
    3. collect  the token deltas that arrived since the last step, in arrival order, for
                the generations in the plan; when none are ready, wait up to wait_s for
                the next one (no busy spin; returns as soon as a delta arrives)

A generation left out of a plan keeps its deltas buffered until it is in one, so nothing is
lost; but priority then only delays delivery, not generation, so EngineLoop puts every
running generation in every plan for a backend that streams deltas (effective_settings).

Frames are cut by the scheduler's FrameParser from the delivered tokens, which also
validates the audio grammar and counts violations (status RPC: grammar_violations); a
violation ends the generation there, and its release aborts the request.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

from orpheus_svc.core.prompt import PromptTooLong, fit_to_slot
from orpheus_svc.core.step import BackendCapabilities, StepPlan, StepResult, StepRow
from orpheus_svc.core.tokens import END_OF_SPEECH_ID

from orpheus_svc.engine.trtllm.stream import StreamEvent

log = logging.getLogger(__name__)


class Streams(Protocol):
    """What the backend needs from the bridge (trtllm_stream.StreamBridge)."""

    def submit(self, gen_id: int, prompt_ids: Sequence[int], sampling_params: Any) -> None: ...

    def abort(self, gen_id: int) -> None: ...

    def next_event(self, timeout: float | None = None) -> StreamEvent | None: ...

    def close(self) -> None: ...


@dataclass(eq=False)
class _LiveRequest:
    """One TensorRT-LLM request as seen from the engine thread."""

    row: StepRow                    # as submitted
    pending: list[int] = field(default_factory=list)  # arrived, not yet handed to the scheduler
    delivered: int = 0
    last_token: int | None = None
    done: bool = False              # TensorRT-LLM sent its final response
    finish_reason: str | None = None
    error: str | None = None
    aborted_at: float | None = None
    released: bool = False          # our scheduler ended the generation


class TrtllmBackend:
    """EngineLoop Backend over TensorRT-LLM streams (see the module docstring)."""

    def __init__(self, streams: Streams, make_params: Callable[[StepRow], Any], *,
                 num_slots: int, max_seq_len: int, wait_s: float = 0.01,
                 abort_grace_s: float = 10.0, clock: Callable[[], float] = time.monotonic,
                 on_close: Callable[[], None] | None = None,
                 seed_refusal: str | None = None) -> None:
        if num_slots < 1:
            raise ValueError(f"num_slots must be >= 1, got {num_slots}")
        self.num_slots = num_slots
        self.max_seq_len = max_seq_len
        self.capabilities = BackendCapabilities(name="trtllm", num_slots=num_slots,
                                                max_seq_len=max_seq_len, streams_deltas=True,
                                                confirms_release=True,
                                                seed_refusal=seed_refusal)
        self._bridge = streams
        self._make_params = make_params
        self._wait_s = wait_s
        self._abort_grace_s = abort_grace_s
        self._clock = clock
        self._on_close = on_close
        # Every TensorRT-LLM request not yet confirmed ended, by gen_id (engine thread only).
        self._requests: dict[int, _LiveRequest] = {}
        self._freed: list[int] = []  # released and ended: reported in the next StepResult
        self.counters = dict(submitted=0, aborted=0, errors=0, unconfirmed_aborts=0)

    @property
    def live(self) -> int:
        """TensorRT-LLM requests that may still hold a KV slot there."""
        return len(self._requests)

    # -- Backend protocol --------------------------------------------------------------------

    def step(self, plan: StepPlan) -> StepResult:
        result = StepResult()
        self._drain(0)  # ends confirmed since the last step free their place before submit
        gen_ids = plan.gen_ids()  # every running generation is in every plan here
        self._retire(gen_ids, result)
        self._submit(plan.prefill, result)
        self._collect(gen_ids, result)
        result.freed, self._freed = self._freed, []
        return result

    def release(self, gen_ids: Sequence[int]) -> list[int]:
        """Ended generations: abort their TensorRT-LLM requests if still running; each is
        freed once TensorRT-LLM confirmed its end (in a later StepResult). Returns those
        already freed: ended in TensorRT-LLM too, or never submitted."""
        freed = []
        for gen_id in gen_ids:
            s = self._requests.get(gen_id)
            if s is None or s.done:
                self._requests.pop(gen_id, None)
                freed.append(gen_id)
            else:
                s.released = True
                self._abort(s)
        return freed

    def _forget(self, gen_id: int) -> None:
        del self._requests[gen_id]
        self._freed.append(gen_id)

    def close(self) -> None:
        """Server shutdown: the bridge aborts every live request and stops; then the LLM
        shuts down. Call it after EngineLoop.stop() (the engine thread owns this object)."""
        self._bridge.close()
        if self._on_close is not None:
            self._on_close()

    # -- 1. retire ---------------------------------------------------------------------------

    def _retire(self, gen_ids: Sequence[int], result: StepResult) -> None:
        now = self._clock()
        in_plan = set(gen_ids)
        for gen_id, s in list(self._requests.items()):
            if s.released:
                if s.done:
                    self._forget(gen_id)
                elif s.aborted_at is not None and now - s.aborted_at > self._abort_grace_s:
                    # Never confirmed: stop counting it, or one lost response blocks a slot forever.
                    log.warning("TensorRT-LLM did not confirm the abort of generation %d within "
                                "%.0f s; no longer counting it as in flight",
                                gen_id, self._abort_grace_s)
                    self.counters["unconfirmed_aborts"] += 1
                    self._forget(gen_id)
            elif s.done and not s.pending and gen_id in in_plan:
                # TensorRT-LLM is done, every token was delivered, and the scheduler still
                # waits for more: end the generation with the reason rather than hang
                # (its release follows at once and forgets the stream).
                result.errors[gen_id] = self._why_ended(s)
                self.counters["errors"] += 1

    @staticmethod
    def _why_ended(s: _LiveRequest) -> str:
        if s.error:
            return s.error
        limit = s.row.request.max_tokens
        reason = s.finish_reason
        if reason == "length":
            return (f"TensorRT-LLM stopped at its length limit after {s.delivered} tokens "
                    f"(max_tokens {limit}); is the engine's max_seq_len smaller than the config's?")
        if reason == "timeout":
            return f"TensorRT-LLM timed the request out after {s.delivered} tokens"
        if reason == "cancelled":
            return f"TensorRT-LLM cancelled the request after {s.delivered} tokens"
        return (f"TensorRT-LLM ended the request (finish reason {reason!r}) after "
                f"{s.delivered} tokens without the stop id")

    # -- 2. submit ---------------------------------------------------------------------------

    def _submit(self, prefill: Sequence[StepRow], result: StepResult) -> None:
        for row in prefill:  # scheduler priority order: the first waiting ones go first
            if row.gen_id in self._requests:
                continue  # already submitted (it stays "prefill" until its first token)
            if not self._fits(row, result) or not self._seed_honoured(row, result):
                continue
            try:
                params = self._make_params(row)
                self._bridge.submit(row.gen_id, row.request.prompt_ids, params)
            except Exception as exc:
                result.errors[row.gen_id] = (f"could not submit to TensorRT-LLM: "
                                             f"{exc.__class__.__name__}: {exc}")
                self.counters["errors"] += 1
                continue
            self._requests[row.gen_id] = _LiveRequest(row)
            self.counters["submitted"] += 1

    def _fits(self, row: StepRow, result: StepResult) -> bool:
        """False (and the reason) if the prompt leaves no room for a frame in the slot.
        EngineLoop's admission refuses such a prompt, so this only catches a request that
        reached the backend some other way; the scheduler fitted max_tokens already."""
        req = row.request
        try:
            fit_to_slot(len(req.prompt_ids), req.max_tokens, self.max_seq_len)
        except PromptTooLong as exc:
            result.errors[row.gen_id] = str(exc)
            self.counters["errors"] += 1
            return False
        return True

    def _seed_honoured(self, row: StepRow, result: StepResult) -> bool:
        """False (and the reason) for a client's seed that TensorRT-LLM would ignore."""
        refusal = self.capabilities.seed_refusal
        if refusal is None or row.request.sampling.seed is None:
            return True
        result.errors[row.gen_id] = f"sampling.seed: {refusal}"
        self.counters["errors"] += 1
        return False

    def _abort(self, s: _LiveRequest) -> None:
        if s.done or s.aborted_at is not None:
            return
        s.aborted_at = self._clock()
        self.counters["aborted"] += 1
        self._bridge.abort(s.row.gen_id)

    # -- 3. collect --------------------------------------------------------------------------

    def _collect(self, gen_ids: Sequence[int], result: StepResult) -> None:
        requests = self._requests
        wanted = [requests[g] for g in gen_ids if g in requests and g not in result.errors]
        ready = any(s.pending or s.error for s in wanted)
        self._drain(0 if ready or not self._requests else self._wait_s)
        for s in wanted:
            gen_id = s.row.gen_id
            if s.error:  # s.done: its release follows at once and forgets the stream
                result.errors[gen_id] = s.error
                self.counters["errors"] += 1
            elif s.pending:
                result.tokens[gen_id] = s.pending
                s.delivered += len(s.pending)
                s.pending = []

    def _drain(self, wait_s: float) -> None:
        """Apply every event that has arrived; wait up to wait_s for the first one."""
        event = self._bridge.next_event(wait_s)
        while event is not None:
            self._apply(event)
            event = self._bridge.next_event(0)

    def _apply(self, ev: StreamEvent) -> None:
        s = self._requests.get(ev.gen_id)
        if s is None:
            return  # a stream we already stopped counting (unconfirmed abort, error)
        if ev.tokens:
            s.pending.extend(ev.tokens)
            s.last_token = ev.tokens[-1]
        if not ev.final:
            return
        s.done, s.finish_reason = True, ev.finish_reason
        if ev.finish_reason == "error":
            s.error = ev.error or "TensorRT-LLM reported an error"
        elif ev.finish_reason == "cancelled" and s.aborted_at is not None:
            pass  # our own abort, confirmed
        elif ev.finish_reason == "stop" and s.last_token != END_OF_SPEECH_ID:
            # TensorRT-LLM may leave the end id out of the output; the scheduler needs it
            # to finish the generation as "stop" (and checks it falls on a frame boundary).
            s.pending.append(END_OF_SPEECH_ID)
            s.last_token = END_OF_SPEECH_ID
