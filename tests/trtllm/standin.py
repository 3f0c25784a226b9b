"""STAND-IN for TensorRT-LLM's LLM.generate_async(..., streaming=True). Not TensorRT-LLM.

It mimics only the surface our bridge uses, as TensorRT-LLM 1.2 defines it:

    out = llm.generate_async(prompt_ids, sampling_params=..., streaming=True)  # on a loop
    async for res in out:          # one item per response; res is out itself
        res.outputs[0].token_ids   # cumulative generated ids
        res.outputs[0].finish_reason, res.finished
    out.abort()                    # the request ends with finish_reason "cancelled"

Responses are pushed from the test thread with emit()/finish()/fail(), the way TensorRT-LLM
pushes them from its own background thread into the result's asyncio queue.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass
class StandInOutput:
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None


class StandInRequest:
    """One request's streaming result (the RequestOutput stand-in)."""

    def __init__(self, llm: "StandInLLM", prompt_ids: list[int], params: Any) -> None:
        self.llm = llm
        self.prompt_ids = prompt_ids
        self.params = params
        self.outputs = [StandInOutput()]
        self.finished = False
        self.aborted = False
        self._loop = asyncio.get_running_loop()  # generate_async must run on a loop
        self._queue: asyncio.Queue = asyncio.Queue()

    # -- test thread: push responses ---------------------------------------------------------

    def emit(self, tokens: list[int], finish_reason: str | None = None) -> None:
        self._loop.call_soon_threadsafe(self._queue.put_nowait, ("ok", list(tokens), finish_reason))

    def finish(self, finish_reason: str = "stop", tokens: list[int] = ()) -> None:
        self.emit(list(tokens), finish_reason)

    def fail(self, exc: BaseException) -> None:
        self._loop.call_soon_threadsafe(self._queue.put_nowait, ("raise", exc, None))

    # -- RequestOutput surface ---------------------------------------------------------------

    def abort(self) -> None:
        self.aborted = True
        self.llm._note_abort(self)
        if self.llm.confirm_aborts:
            self._queue.put_nowait(("ok", [], "cancelled"))  # called on the loop thread

    def __aiter__(self) -> "StandInRequest":
        return self

    async def __anext__(self) -> "StandInRequest":
        if self.finished:
            raise StopAsyncIteration
        kind, payload, reason = await self._queue.get()
        if kind == "raise":
            raise payload
        self.outputs[0].token_ids.extend(payload)
        if reason is not None:
            self.outputs[0].finish_reason = reason
            self.finished = True
            self.llm._note_end(self)
        return self


class StandInLLM:
    """Records requests; `script` (optional) makes each request stream on its own
    (tests/trtllm/replay.py replays TensorRT-LLM's executor timing that way). `llm_kwargs`:
    the arguments it was constructed with, when it stands in for tensorrt_llm.LLM."""

    def __init__(self, *, confirm_aborts: bool = True, submit_error: Exception | None = None,
                 script: Any = None, llm_kwargs: dict | None = None,
                 max_seq_len: int | None = None) -> None:
        self.llm_kwargs = llm_kwargs or {}
        # TensorRT runtime without chunked prefill: generate_async refuses
        # prompt + max_tokens > max_seq_len (BaseLLM._check_arguments in llmapi/llm.py).
        self.max_seq_len = max_seq_len
        self.shut_down = False
        self.confirm_aborts = confirm_aborts
        self.submit_error = submit_error
        self.script = script  # callable(request) -> list of (tokens, finish_reason|None)
        self.requests: list[StandInRequest] = []
        self.live = 0
        self.max_live = 0
        self.cond = threading.Condition()

    def generate_async(self, inputs: list[int], sampling_params: Any = None,
                       streaming: bool = False) -> StandInRequest:
        if not streaming:
            raise AssertionError("the backend must ask for streaming results")
        if self.submit_error is not None:
            raise self.submit_error
        max_tokens = getattr(sampling_params, "kwargs", {}).get("max_tokens") or 0
        if self.max_seq_len is not None and len(inputs) + max_tokens > self.max_seq_len:
            raise ValueError(f"The sum of prompt length ({len(inputs)}) and query length (0) "
                             f"max_tokens ({max_tokens}) should not exceed max_seq_len "
                             f"({self.max_seq_len})")
        req = StandInRequest(self, list(inputs), sampling_params)
        with self.cond:
            self.requests.append(req)
            self.live += 1
            self.max_live = max(self.max_live, self.live)
            self.cond.notify_all()
        if self.script is not None:
            for tokens, reason in self.script(req):
                req._queue.put_nowait(("ok", list(tokens), reason))
        return req

    def shutdown(self) -> None:
        self.shut_down = True

    def wait_for(self, pred, timeout: float = 10.0) -> None:
        with self.cond:
            ok = self.cond.wait_for(lambda: pred(self), timeout)
        if not ok:
            raise AssertionError(f"stand-in condition not reached; {len(self.requests)} requests")

    def _note_abort(self, req: StandInRequest) -> None:
        with self.cond:
            self.cond.notify_all()

    def _note_end(self, req: StandInRequest) -> None:
        with self.cond:
            self.live -= 1
            self.cond.notify_all()
