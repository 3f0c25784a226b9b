"""GraphRunner: the graph engine's static buffers, its CUDA graphs and its launches.

    host (engine thread)                         device (one stream)
    launch(step n):  rows.py: decode rows + one  -> per chunk of <= capacity rows:
                     row per prompt token, packed     one H2D copy of its block -> graph(bucket)
                     into a pinned staging block      -> D2H copy of the ids into pinned
                     per chunk (inputs.py; turn n % 2)   (turn n % 2)
                     record end event n % 4      -> event
    collect(n):      wait for event n, read the ids (decode rows; each prompt's last row)

Nothing of a step runs eagerly: a new prompt's tokens are rows of the captured step
(rows.py), and a chunk's inputs go to the device in one non-blocking copy from pinned
memory, contiguous bytes into the bucket's own contiguous input block (inputs.py).
Everything a step needs beyond its input rows lives on the device (step.py SlotState), so
step n+1 can be launched before step n's ids are read (run-ahead, engine/loop.py): its
decode rows' input tokens are the ids step n writes into last_ids. Two sets of pinned
buffers alternate, so a launch never overwrites what a step still in flight reads or writes.

On CUDA every bucket's step is captured at start-up into one memory pool, largest bucket
first (the smaller ones reuse its memory), twice: the unseeded step and the batch-invariant
one that runs every step holding a seeded row (engine/model/invariant.py); elsewhere (the CPU, or engine.cuda_graphs
off) the same function runs eagerly on the same static buffers, which is how the tests
check the graph path's logic without a GPU.
"""

from __future__ import annotations

import logging
import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from orpheus_svc.audio.gpu_streams import lm_stream
from orpheus_svc.engine.graph.attention import (INVARIANT_SPLITS, DecodeAttention,
                                                decode_attention_reference, splits_for,
                                                triton_kernel_works)
from orpheus_svc.engine.graph.buckets import batch_buckets, bucket_for
from orpheus_svc.engine.graph.choose import TorchChoice, triton_choice
from orpheus_svc.engine.graph.fp8_paths import choose_fp8_paths
from orpheus_svc.engine.graph.inputs import block_words, np_views, views
from orpheus_svc.engine.graph.rows import PrefillRow, step_rows
from orpheus_svc.engine.graph.fused import TorchOps, TritonOps, triton_ops_work
from orpheus_svc.engine.graph.step import MakeLora, SlotState, decode_step
from orpheus_svc.engine.model.invariant import invariant_step
from orpheus_svc.engine.model.llama import SlotLlama
from orpheus_svc.engine.model.lora import LoraRows, gather_expand, gather_shrink

log = logging.getLogger(__name__)

EVENTS = 4  # end events in the ring (GraphRunner.__init__)


@dataclass
class Launch:
    """A step in flight: where its ids will be, and the event that says they are there."""

    turn: int
    num_prefill: int
    num_decode: int
    event: object | None  # torch.cuda.Event, None off CUDA (the work is done already)
    prefill_last: np.ndarray | None = None  # each prefill's last row (its first audio id)


class GraphRunner:
    def __init__(self, model: SlotLlama, max_batch: int, *, graphs: bool,
                 kernel: str = "auto", buckets: Sequence[int] | None = None,
                 fused: str = "auto", prefill_rows: int = 0) -> None:
        """model: a SlotLlama with one spare slot (the dummy). graphs: capture CUDA graphs
        (CUDA only). kernel: decode attention, "triton" | "torch" | "auto" (Triton on CUDA).
        buckets: the row counts to capture (default: buckets.batch_buckets(max_batch +
        prefill_rows)). fused: the step's small operations (fused.py), "triton" | "torch" |
        "auto" (Triton on CUDA when its start-up check passes). prefill_rows: prompt tokens
        a step's largest graph holds beside max_batch decode rows (rows.py); more run as
        further replays of the same step."""
        self.model = model
        self.device = device = model.device
        if model.k_cache[0].shape[0] != model.num_slots + 1:
            raise ValueError("the graph engine needs a SlotLlama with spare_slots=1 (its dummy slot)")
        self.state = SlotState(model.num_slots, device)
        self.buckets = (sorted(set(buckets)) if buckets
                        else batch_buckets(max_batch + prefill_rows))
        cuda = device.type == "cuda"
        if graphs and not cuda:
            raise ValueError("CUDA graphs need a CUDA device")
        if kernel == "auto":
            kernel = "triton" if cuda and triton_kernel_works(model) else "torch"
        self.kernel = kernel
        if fused == "auto":
            fused = "triton" if cuda and triton_ops_work(model) else "torch"
        self.ops = {"triton": TritonOps, "torch": TorchOps}[fused]
        # the token choice follows the fused operations: the kernel (choose.py) where they
        # are Triton's and it passes its own check, else torch
        self.choice = (triton_choice(model.lm_head) if self.ops is TritonOps else None
                       ) or TorchChoice()
        self.lora_kernels = "none"
        self._make_lora = self._lora_rows(model, cuda)
        # each FP8 projection's path at each bucket's row count, before the capture
        self.fp8_paths = choose_fp8_paths(model, self.buckets)
        log.info("graph engine: decode attention %s, small operations %s, token choice %s, "
                 "LoRA %s, CUDA graphs %s", self.kernel, self.ops.name, self.choice.name,
                 self.lora_kernels, "on" if graphs else "off")
        width = self.capacity = self.buckets[-1]
        # one input block per bucket (inputs.py), which that bucket's step reads its rows
        # from; a chunk's rows arrive in one copy of contiguous bytes
        self._inputs = {b: torch.zeros((block_words(b),), dtype=torch.int64, device=device)
                        for b in self.buckets}
        self.out = torch.zeros((width,), dtype=torch.long, device=device)
        # Host side, two turns (a step in flight keeps its own): a step holds at most
        # max_batch decode rows and, beside them, prefill_rows prompt tokens or one whole
        # prompt of up to max_seq_len; each chunk's staging has a block of its own (its H2D
        # copy may still be reading it when the next chunk is packed), so the staging is
        # one largest block more than the rows' chunks.
        rows = max_batch + max(prefill_rows, model.max_seq_len)
        staging = (-(-rows // width) + 1) * block_words(width)
        self._staging = [torch.zeros((staging,), dtype=torch.int64, pin_memory=cuda)
                         for _ in range(2)]
        self._staging_np = [t.numpy() for t in self._staging]
        self._host_out = [torch.zeros((rows,), dtype=torch.long, pin_memory=cuda)
                          for _ in range(2)]
        # End events, reused: step i records _ends[i % EVENTS]; a launch waits on the step
        # before last (its turn's buffers), and the clock reads step i - 1's event when step
        # i is collected, so with at most two steps in flight four never collide.
        self._ends = [torch.cuda.Event(blocking=True, enable_timing=True)
                      for _ in range(EVENTS)] if cuda else None
        self._launched = 0
        self._turn = 0
        # the step's stream, above SNAC's on the device (audio/gpu_streams.py): a codec call
        # fills the step's gaps and yields the SMs when step kernels are queued
        self.stream = lm_stream(device) if cuda else None
        spec = model.spec
        sms = torch.cuda.get_device_properties(device).multi_processor_count if cuda else 8
        # (bucket, invariant) -> attention: a seeded step splits every row's keys
        # the same way whatever the bucket (INVARIANT_SPLITS); the reference attends over
        # the whole slot, whose span no batch-mate moves
        self._attend = {}
        for b in self.buckets:
            for invariant in (False, True):
                if self.kernel == "triton":
                    splits = INVARIANT_SPLITS if invariant else splits_for(
                        b, spec.num_key_value_heads, sms)
                    self._attend[b, invariant] = DecodeAttention(
                        b, spec.num_attention_heads, spec.num_key_value_heads, spec.head_dim,
                        splits, device, model.dtype)
                else:
                    self._attend[b, invariant] = decode_attention_reference
        self.graphs: dict[tuple[int, bool], torch.cuda.CUDAGraph] = {}
        self.capture_s = 0.0
        self.capture_bytes = 0
        if graphs:
            self.capture()

    # -- start-up -------------------------------------------------------------------------

    def _lora_rows(self, model: SlotLlama, cuda: bool) -> MakeLora | None:
        """How a step finds its rows' adapters (engine/model/lora.py): on CUDA indexed, the
        adapter input row read on the device by the Triton kernels (else a gather), so the
        captured graph holds it; elsewhere grouped on the host (the CPU: no sync to pay),
        which keeps a seeded row's bits batch-invariant as the torch backend does."""
        pool = model.lora
        if pool is None:
            return None
        if not cuda:
            self.lora_kernels = "grouped (host)"
            return lambda adapter: LoraRows.grouped(pool, adapter.numpy())
        from orpheus_svc.engine.graph.lora_kernels import (lora_kernels_work, triton_expand,
                                                           triton_shrink)
        if lora_kernels_work(pool):
            self.lora_kernels = "triton"
            return lambda adapter: LoraRows.indexed(pool, adapter, triton_shrink, triton_expand)
        self.lora_kernels = "gather"
        return lambda adapter: LoraRows.indexed(pool, adapter, gather_shrink, gather_expand)

    @torch.inference_mode()
    def _run(self, bucket: int, invariant: bool = False) -> None:
        """One step of `bucket` rows on the static buffers; `invariant`: a step that holds a
        seeded row, whose every row's bits are its own (engine/model/invariant.py:
        fixed-shape GEMMs, an attention split that does not follow the bucket)."""
        ints, floats = self.inputs(bucket)
        with invariant_step(invariant):
            decode_step(self.model, self.state, ints, floats, self._attend[bucket, invariant],
                        self.out[:bucket], self.ops, self._make_lora, self.choice)

    def inputs(self, bucket: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The (ints, floats) rows bucket `bucket`'s step reads (views of its input block)."""
        return views(self._inputs[bucket], bucket)

    def capture(self) -> None:
        """Two CUDA graphs per bucket (unseeded, invariant), into one memory pool (module
        docstring)."""
        dev = self.device
        torch.cuda.synchronize(dev)
        # torch.cuda.graph empties the allocator's cache before each capture: empty it first
        # too, so the difference below is what the graphs hold (it read negative before)
        torch.cuda.empty_cache()
        t0, reserved0 = time.perf_counter(), torch.cuda.memory_reserved(dev)
        pool = torch.cuda.graph_pool_handle()
        pad = torch.zeros((block_words(self.capacity),), dtype=torch.int64)
        for b in self.buckets:  # warm-up runs touch the dummy slot only
            step_rows(None, ()).pack(*np_views(pad.numpy(), b), 0, 0, b, self.state.dummy)
            self._inputs[b].copy_(pad[:block_words(b)])
        side = torch.cuda.Stream(dev)
        for b in reversed(self.buckets):
            for invariant in (False, True):
                side.wait_stream(torch.cuda.current_stream(dev))
                with torch.cuda.stream(side):
                    for _ in range(2):  # Triton compiles, cuBLAS plans: before the capture
                        self._run(b, invariant)
                torch.cuda.current_stream(dev).wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool):
                    self._run(b, invariant)
                self.graphs[b, invariant] = graph
        torch.cuda.synchronize(dev)
        self.capture_s = time.perf_counter() - t0
        self.capture_bytes = torch.cuda.memory_reserved(dev) - reserved0
        log.info("graph engine: captured %d decode graphs (buckets %s, each unseeded and "
                 "seeded) in %.1f s; %.0f MiB reserved for them", len(self.graphs),
                 self.buckets, self.capture_s,
                 self.capture_bytes / 2**20)

    # -- the step -------------------------------------------------------------------------

    def on_stream(self):
        """The context in which the engine thread's device work runs: the step's stream
        (CUDA), so that its launches, copies, events and LoRA writes stay in one order."""
        return torch.cuda.stream(self.stream) if self.stream is not None else nullcontext()

    def launch(self, prefill: Sequence[PrefillRow], decode: np.ndarray | None,
               invariant: bool = False) -> Launch:
        """Queue one step: decode rows as a [5, n] int64 array (slots, pos, fpos, stop_ok,
        counter; [6, n] with the adapter) and new prompts (rows.py), all in the captured
        step: one replay per chunk of at most `capacity` rows. Returns at once on CUDA.
        `invariant`: every row's bits are its own (_run). (Timed from outside: clock.py.)"""
        with self.on_stream():
            turn = self._turn
            self._turn ^= 1
            if self._launched >= 2 and self._ends is not None:
                self._ends[(self._launched - 2) % EVENTS].synchronize()  # collected already
            rows = step_rows(decode, prefill)
            staging, staging_np = self._staging[turn], self._staging_np[turn]
            host = self._host_out[turn]
            at = 0  # each chunk's own staging block
            with torch.inference_mode():
                for lo, hi in rows.chunks(self.capacity):
                    bucket = bucket_for(self.buckets, hi - lo)
                    size = block_words(bucket)
                    rows.pack(*np_views(staging_np[at:at + size], bucket), lo, hi, bucket,
                              self.state.dummy)
                    self._inputs[bucket].copy_(staging[at:at + size], non_blocking=True)
                    graph = self.graphs.get((bucket, invariant))
                    if graph is not None:
                        graph.replay()
                    else:
                        self._run(bucket, invariant)
                    host[lo:hi].copy_(self.out[:hi - lo], non_blocking=True)
                    at += size
            event = None
            if self._ends is not None:
                # blocking: the engine thread sleeps until the step is done instead of
                # spinning on a core (the GIL is released either way)
                event = self._ends[self._launched % EVENTS]
                event.record()
            self._launched += 1
        return Launch(turn, len(prefill), rows.decode, event, rows.prefill_last)

    def collect(self, launch: Launch) -> tuple[np.ndarray, np.ndarray]:
        """(prefill ids, decode ids) of a launched step, waiting for it if need be."""
        if launch.event is not None:
            launch.event.synchronize()
        host = self._host_out[launch.turn].numpy()
        first = host[launch.prefill_last] if launch.num_prefill else host[:0]
        return first.copy(), host[:launch.num_decode].copy()
