"""Bridge from TensorRT-LLM's asyncio streaming results to the EngineLoop thread.

    engine thread                     bridge thread (own asyncio loop)
    -------------                     --------------------------------
    submit(gen_id, ids, params) --->  task: out = llm.generate_async(ids, params, streaming=True)
                                            async for res in out: events.put(StreamEvent(...))
    abort(gen_id) ----------------->  out.abort()   (TensorRT-LLM then ends the stream, reason
                                                     "cancelled")
    next_event(timeout) <-----------  events (queue.SimpleQueue: thread-safe, FIFO)

generate_async is called on the bridge loop on purpose: TensorRT-LLM gives a result an
asyncio queue only when it is created inside a running loop, and `async for` needs it.
Every RequestOutput is touched on the bridge loop only; the engine thread sees plain
StreamEvent values, one per response, in order per generation.

`llm` is duck-typed: anything with generate_async(inputs, sampling_params=..., streaming=True)
returning an async-iterable result whose items have .outputs[0].token_ids (cumulative),
.outputs[0].finish_reason and .finished, and which has .abort(). tensorrt_llm's LLM (both
backends) fits; so does the stand-in the tests use.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from dataclasses import dataclass, field
from typing import Any, Sequence

from orpheus_svc.threads import os_named

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StreamEvent:
    """New tokens of one generation, and whether TensorRT-LLM has finished it.

    finish_reason is TensorRT-LLM's ("stop", "length", "cancelled", "timeout") on the final
    event, "error" when the request failed (error holds the message), else None."""

    gen_id: int
    tokens: list[int] = field(default_factory=list)
    final: bool = False
    finish_reason: str | None = None
    error: str | None = None


class StreamBridge:
    """Runs TensorRT-LLM streams on a private asyncio loop thread (see module docstring)."""

    def __init__(self, llm: Any, *, name: str = "trtllm-streams") -> None:
        self._llm = llm
        self._events: queue.SimpleQueue[StreamEvent] = queue.SimpleQueue()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=os_named(self._loop.run_forever), name=name,
                                        daemon=True)
        # Loop-thread state: live results; submitted streams whose task has not started yet
        # (callbacks run FIFO, so a submit is registered before any later abort runs); and
        # aborts that arrived before their stream started.
        self._results: dict[int, Any] = {}
        self._not_started: set[int] = set()
        self._abort_first: set[int] = set()
        self._thread.start()

    # -- engine thread ---------------------------------------------------------------------

    def submit(self, gen_id: int, prompt_ids: Sequence[int], sampling_params: Any) -> None:
        self._loop.call_soon_threadsafe(self._not_started.add, gen_id)
        asyncio.run_coroutine_threadsafe(
            self._stream(gen_id, list(prompt_ids), sampling_params), self._loop)

    def abort(self, gen_id: int) -> None:
        self._loop.call_soon_threadsafe(self._abort, gen_id)

    def next_event(self, timeout: float | None = None) -> StreamEvent | None:
        """The next event; waits up to `timeout` seconds (0: do not wait). None if none came."""
        try:
            if timeout is None or timeout > 0:
                return self._events.get(timeout=timeout)
            return self._events.get_nowait()
        except queue.Empty:
            return None

    def close(self, timeout: float = 5.0) -> None:
        """Abort every live stream and stop the loop thread (the LLM itself is not shut down)."""
        if self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._abort_all)
        self._loop.call_soon_threadsafe(self._loop.stop)  # runs after the aborts (FIFO)
        self._thread.join(timeout)
        if not self._thread.is_alive():
            self._loop.close()

    # -- bridge loop -----------------------------------------------------------------------

    def _abort_all(self) -> None:
        for gen_id in list(self._results):
            self._abort(gen_id)

    def _abort(self, gen_id: int) -> None:
        result = self._results.get(gen_id)
        if result is None:
            if gen_id in self._not_started:
                self._abort_first.add(gen_id)
            return  # else the stream already ended; its final event is on its way
        try:
            result.abort()
        except Exception as exc:  # an abort that fails must not kill the loop thread
            log.warning("aborting TensorRT-LLM request of generation %d failed: %s", gen_id, exc)

    async def _stream(self, gen_id: int, prompt_ids: list[int], params: Any) -> None:
        self._not_started.discard(gen_id)
        if gen_id in self._abort_first:  # cancelled before it ever reached TensorRT-LLM
            self._abort_first.discard(gen_id)
            self._events.put(StreamEvent(gen_id, final=True, finish_reason="cancelled"))
            return
        seen = 0
        final = False
        try:
            result = self._llm.generate_async(prompt_ids, sampling_params=params, streaming=True)
            self._results[gen_id] = result
            async for res in result:
                out = res.outputs[0]
                ids = out.token_ids or []
                # token_ids is cumulative; slicing by our own count is right whether one
                # response or several arrived since the last one we read.
                new, seen = list(ids[seen:]), len(ids)
                final = bool(res.finished)
                if new or final:
                    self._events.put(StreamEvent(gen_id, new, final,
                                                 out.finish_reason if final else None))
            if not final:  # the iterator ended without a final response: say so, once
                self._events.put(StreamEvent(gen_id, final=True, finish_reason="error",
                                             error="TensorRT-LLM ended the stream without a "
                                                   "final response"))
        except Exception as exc:
            if final:  # already reported as finished; nothing more to tell the engine
                log.warning("TensorRT-LLM stream of generation %d raised after its final "
                            "response: %s", gen_id, exc)
            else:
                self._events.put(StreamEvent(
                    gen_id, final=True, finish_reason="error",
                    error=f"TensorRT-LLM: {exc.__class__.__name__}: {exc}"))
        finally:
            self._results.pop(gen_id, None)
            self._abort_first.discard(gen_id)
