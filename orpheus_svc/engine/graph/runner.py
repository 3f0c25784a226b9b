"""GraphRunner: the graph engine's static buffers, its CUDA graphs and its launches.

    host (engine thread)                         device (one stream)
    launch(step n):  pack inputs into pinned  -> H2D copy -> [prefill, eager] -> graph(bucket)
                     staging (turn n % 2)        -> D2H copy of the ids into pinned (turn n % 2)
                     record event n              -> event n
    collect(n):      wait for event n, read the ids

Everything a step needs beyond its five input rows lives on the device (step.py SlotState),
so step n+1 can be launched before step n's ids are read (run-ahead, engine/loop.py): its
input tokens are the ids step n writes into last_ids. Two sets of pinned buffers alternate,
so a launch never overwrites what a step still in flight reads or writes.

On CUDA every bucket's decode step is captured once at start-up into one memory pool,
largest bucket first (the smaller ones reuse its memory); elsewhere (the CPU, or
engine.cuda_graphs off) the same function runs eagerly on the same static buffers, which is
how the tests check the graph path's logic without a GPU.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import NamedTuple, Sequence

import numpy as np
import torch

from orpheus_svc.engine.graph.attention import (DecodeAttention, decode_attention_reference,
                                                splits_for, triton_kernel_works)
from orpheus_svc.engine.graph.buckets import INPUT_ROWS, batch_buckets, bucket_for, pack_inputs
from orpheus_svc.engine.graph.fused import TorchOps, TritonOps, triton_ops_work
from orpheus_svc.engine.graph.step import SlotState, choose_tokens, decode_step
from orpheus_svc.engine.model.llama import SlotLlama
from orpheus_svc.engine.model.sampling import int64_bits

log = logging.getLogger(__name__)


class PrefillRow(NamedTuple):
    """One new generation of a step: its prompt goes into its slot, and its sampling state
    (set on the device here) is what its decode rows read later."""

    slot: int
    prompt_ids: Sequence[int]
    temperature: float
    top_p: float
    repetition_penalty: float
    seed: int
    frame_position: int
    stop_allowed: bool
    counter: int             # tokens sampled so far (the counter of its uniform)
    invariant: bool = False  # a seeded session's: its bits must not depend on the batch


@dataclass
class Launch:
    """A step in flight: where its ids will be, and the event that says they are there."""

    turn: int
    num_prefill: int
    num_decode: int
    event: object | None  # torch.cuda.Event, None off CUDA (the work is done already)


class GraphRunner:
    def __init__(self, model: SlotLlama, max_batch: int, *, graphs: bool,
                 kernel: str = "auto", buckets: Sequence[int] | None = None,
                 fused: str = "auto") -> None:
        """model: a SlotLlama with one spare slot (the dummy). graphs: capture CUDA graphs
        (CUDA only). kernel: decode attention, "triton" | "torch" | "auto" (Triton on CUDA).
        buckets: the batch sizes to capture (default: buckets.batch_buckets(max_batch)).
        fused: the step's small operations (fused.py), "triton" | "torch" | "auto" (Triton on
        CUDA when its start-up check passes)."""
        self.model = model
        self.device = device = model.device
        if model.k_cache[0].shape[0] != model.num_slots + 1:
            raise ValueError("the graph engine needs a SlotLlama with spare_slots=1 (its dummy slot)")
        self.state = SlotState(model.num_slots, device)
        self.buckets = sorted(set(buckets)) if buckets else batch_buckets(max_batch)
        cuda = device.type == "cuda"
        if graphs and not cuda:
            raise ValueError("CUDA graphs need a CUDA device")
        if kernel == "auto":
            kernel = "triton" if cuda and triton_kernel_works(model) else "torch"
        self.kernel = kernel
        if fused == "auto":
            fused = "triton" if cuda and triton_ops_work(model) else "torch"
        self.ops = {"triton": TritonOps, "torch": TorchOps}[fused]
        log.info("graph engine: decode attention %s, small operations %s, CUDA graphs %s",
                 self.kernel, self.ops.name, "on" if graphs else "off")
        width = self.buckets[-1]
        self.ints = torch.zeros((len(INPUT_ROWS), width), dtype=torch.long, device=device)
        self.out = torch.zeros((width,), dtype=torch.long, device=device)
        self._staging = [torch.zeros((len(INPUT_ROWS), width), dtype=torch.long,
                                     pin_memory=cuda) for _ in range(2)]
        self._host_out = [torch.zeros((2, width), dtype=torch.long, pin_memory=cuda)
                          for _ in range(2)]
        self._events: list = [None, None]
        self._turn = 0
        spec = model.spec
        sms = torch.cuda.get_device_properties(device).multi_processor_count if cuda else 8
        self._attend = {}
        for b in self.buckets:
            if self.kernel == "triton":
                self._attend[b] = DecodeAttention(
                    b, spec.num_attention_heads, spec.num_key_value_heads, spec.head_dim,
                    splits_for(b, spec.num_key_value_heads, sms), device, model.dtype)
            else:
                self._attend[b] = decode_attention_reference
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.capture_s = 0.0
        self.capture_bytes = 0
        if graphs:
            self.capture()

    # -- start-up -------------------------------------------------------------------------

    @torch.inference_mode()
    def _run(self, bucket: int) -> None:
        decode_step(self.model, self.state, self.ints[:, :bucket], self._attend[bucket],
                    self.out[:bucket], self.ops)

    def capture(self) -> None:
        """One CUDA graph per bucket, into one memory pool (module docstring)."""
        dev = self.device
        torch.cuda.synchronize(dev)
        # torch.cuda.graph empties the allocator's cache before each capture: empty it first
        # too, so the difference below is what the graphs hold (it read negative before)
        torch.cuda.empty_cache()
        t0, reserved0 = time.perf_counter(), torch.cuda.memory_reserved(dev)
        pool = torch.cuda.graph_pool_handle()
        pad = np.zeros((len(INPUT_ROWS), self.buckets[-1]), np.int64)
        pack_inputs(pad, self.state.dummy, *(np.zeros(0, np.int64),) * 5, self.buckets[-1])
        self.ints.copy_(torch.from_numpy(pad))  # warm-up runs touch the dummy slot only
        side = torch.cuda.Stream(dev)
        for b in reversed(self.buckets):
            side.wait_stream(torch.cuda.current_stream(dev))
            with torch.cuda.stream(side):
                for _ in range(2):  # Triton compiles, cuBLAS plans: before the capture
                    self._run(b)
            torch.cuda.current_stream(dev).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                self._run(b)
            self.graphs[b] = graph
        torch.cuda.synchronize(dev)
        self.capture_s = time.perf_counter() - t0
        self.capture_bytes = torch.cuda.memory_reserved(dev) - reserved0
        log.info("graph engine: captured %d decode graphs (buckets %s) in %.1f s; %.0f MiB "
                 "reserved for them", len(self.graphs), self.buckets, self.capture_s,
                 self.capture_bytes / 2**20)

    # -- the step -------------------------------------------------------------------------

    def launch(self, prefill: Sequence[PrefillRow], decode: np.ndarray | None) -> Launch:
        """Queue one step: prefill rows, decode rows as a [5, n] int64 array
        (buckets.INPUT_ROWS). Returns at once on CUDA. (Timed from outside: clock.py.)"""
        cuda = self.device.type == "cuda"
        turn = self._turn
        self._turn ^= 1
        if self._events[turn] is not None:
            self._events[turn].synchronize()  # the step before last: collected already
        host = self._host_out[turn]
        num_p = len(prefill)
        n = 0 if decode is None else decode.shape[1]
        with torch.inference_mode():
            if num_p:
                ids = self._prefill(prefill)
                host[1, :num_p].copy_(ids, non_blocking=True)
            if n:
                bucket = bucket_for(self.buckets, n)
                staging = self._staging[turn]
                pack_inputs(staging.numpy(), self.state.dummy, *decode, bucket)
                self.ints[:, :bucket].copy_(staging[:, :bucket], non_blocking=True)
                graph = self.graphs.get(bucket)
                if graph is not None:
                    graph.replay()
                else:
                    self._run(bucket)
                host[0, :n].copy_(self.out[:n], non_blocking=True)
        event = None
        if cuda:
            # blocking: the engine thread sleeps until the step is done instead of spinning
            # on a core (the GIL is released either way)
            event = torch.cuda.Event(blocking=True, enable_timing=True)
            event.record()
        self._events[turn] = event
        return Launch(turn, num_p, n, event)

    def collect(self, launch: Launch) -> tuple[np.ndarray, np.ndarray]:
        """(prefill ids, decode ids) of a launched step, waiting for it if need be."""
        if launch.event is not None:
            launch.event.synchronize()
        host = self._host_out[launch.turn].numpy()
        return host[1, :launch.num_prefill].copy(), host[0, :launch.num_decode].copy()

    def _prefill(self, rows: Sequence[PrefillRow]) -> torch.Tensor:
        """Run prompts into their slots (eager: prompt lengths vary) and choose each row's
        first token with the decode step's own function."""
        dev, state = self.device, self.state
        slots = [r.slot for r in rows]
        s = torch.as_tensor(slots, device=dev)
        state.params[:, s] = torch.tensor(
            [[r.temperature for r in rows], [r.top_p for r in rows],
             [r.repetition_penalty for r in rows]], dtype=torch.float32).to(dev)
        state.seeds[s] = torch.from_numpy(int64_bits([r.seed for r in rows])).to(dev)
        state.seen[s] = False
        hidden = self.model.prefill(slots, [r.prompt_ids for r in rows],
                                    [r.invariant for r in rows])
        small = torch.tensor([[r.frame_position for r in rows],
                              [int(r.stop_allowed) for r in rows],
                              [r.counter for r in rows]], dtype=torch.long).to(dev)
        return choose_tokens(self.model, state, hidden, s, small[0], small[1], small[2])
