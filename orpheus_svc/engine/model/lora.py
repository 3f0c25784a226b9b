"""LoRA adapters batched into the base model's step: a device pool of adapter weights, and each
row's low-rank update applied with gathered matmuls (Punica's BGMV / S-LoRA idea).

The pool is allocated once at start-up (engine.max_adapters x engine.max_lora_rank), one
entry per adapter slot plus a last, all-zero entry that rows of the base model (adapter
index -1) read, so no shape ever depends on which adapters are loaded. Per layer and per
fused projection of SlotLlama (qkv, o, gate_up, down), S = the number of PEFT modules fused
into it (3, 1, 2, 1) and R = max_lora_rank:

    a [N + 1, S * R, in]     rows j*R .. j*R + r - 1: module j's lora_A (r x in)
    b [N + 1, out, R]        columns 0 .. r - 1 of module j's output rows: its lora_B x scaling

and a row x of a fused projection y = x W^T on adapter n gets, per module j (its output
columns [off_j, off_j + n_j)):

    shrink   s = x a[n]^T                          [S * R]   one matmul for all modules
    expand   y[off_j : off_j + n_j] += s[j*R : (j+1)*R] b[n, off_j : off_j + n_j]^T

A rank below R is zero-padded (zeros add exact zeros) and a module the adapter leaves out
is all zeros (skipped where the host knows it). PEFT's scaling (lora_alpha / r, rsLoRA:
/ sqrt(r)) is folded into b at install.

Two ways to apply it, the same function (LoraRows):

* grouped (the CPU and the torch backend, whose rows are on the host): rows are grouped
  by adapter and each group's shrink and expand go through rows_matmul, so inside an
  invariant_step a seeded row's bits do not depend on its batch-mates
  (engine/model/invariant.py), adapters or not.
* indexed (the graph engine on CUDA, inside its captured step): the adapter index of each
  row is a device tensor; shrink and expand read each row's adapter straight from the
  pool: Triton kernels (engine/graph/lora_kernels.py) or, where they do not run, a gather
  and a batched matmul. Nothing depends on the data's values, so the graph holds it and
  loading an adapter only rewrites pool memory (no recapture).
"""

from __future__ import annotations

import logging
from typing import Callable, Sequence

import numpy as np
import torch

from orpheus_svc.engine.model.invariant import rows_matmul
from orpheus_svc.models.llama_config import LlamaSpec

log = logging.getLogger(__name__)

# SlotLlama's fused projections and the PEFT modules fused into each, in output order.
FUSED = {
    "qkv": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    "o": ("self_attn.o_proj",),
    "gate_up": ("mlp.gate_proj", "mlp.up_proj"),
    "down": ("mlp.down_proj",),
}


def _dims(spec: LlamaSpec) -> dict[str, tuple[int, list[int]]]:
    """Per fused projection: (in features, [out features of each module])."""
    h, i, q, kv = spec.hidden_size, spec.intermediate_size, spec.q_dim, spec.kv_dim
    return {"qkv": (h, [q, kv, kv]), "o": (q, [h]), "gate_up": (h, [i, i]), "down": (i, [h])}


class LoraPool:
    """The adapter pool on the device (module docstring). Written only by the engine thread
    (install, clear: between steps), read by every step."""

    def __init__(self, spec: LlamaSpec, capacity: int, max_rank: int,
                 device: torch.device | str, dtype: torch.dtype) -> None:
        if capacity < 1 or max_rank < 1:
            raise ValueError("a LoRA pool needs at least one adapter slot of rank >= 1")
        self.spec, self.capacity, self.rank = spec, capacity, max_rank
        self.device, self.dtype = torch.device(device), dtype
        self.base_index = capacity  # the all-zero entry base rows read
        dims = _dims(spec)
        self.slices: dict[str, list[tuple[int, int]]] = {}
        for name, (_, outs) in dims.items():
            offsets = np.cumsum([0] + outs[:-1]).tolist()
            self.slices[name] = list(zip(offsets, outs))
        n = capacity + 1
        self.a = [{name: torch.zeros((n, len(outs) * max_rank, inp), device=self.device,
                                     dtype=dtype) for name, (inp, outs) in dims.items()}
                  for _ in range(spec.num_hidden_layers)]
        self.b = [{name: torch.zeros((n, sum(outs), max_rank), device=self.device, dtype=dtype)
                   for name, (_, outs) in dims.items()} for _ in range(spec.num_hidden_layers)]
        # per adapter slot: the fused projections it adapts in some layer (host side, so the
        # grouped path skips the others)
        self.adapted: list[frozenset[str]] = [frozenset()] * capacity
        log.info("LoRA adapter pool preallocated: %d adapters of rank <= %d, %d bytes",
                 capacity, max_rank, self.nbytes)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for layer in self.a + self.b
                   for t in layer.values())

    def install(self, index: int, layers: dict[int, dict[str, tuple[torch.Tensor, torch.Tensor]]],
                scaling: float) -> None:
        """Write one adapter's weights (AdapterWeights.layers: per layer, PEFT module ->
        (A [r, in], B [out, r])) into slot `index`, everything else of the slot zeroed."""
        if not 0 <= index < self.capacity:
            raise IndexError(f"adapter slot {index} outside 0..{self.capacity - 1}")
        self.clear(index)
        r_max, adapted = self.rank, set()
        for li, modules in layers.items():
            for fused, names in FUSED.items():
                for j, module in enumerate(names):
                    if module not in modules:
                        continue
                    a, b = modules[module]
                    r = a.shape[0]
                    if r > r_max:
                        raise ValueError(f"rank {r} above the pool's {r_max}")
                    off, n = self.slices[fused][j]
                    self.a[li][fused][index, j * r_max:j * r_max + r] = a.to(self.device, self.dtype)
                    self.b[li][fused][index, off:off + n, :r] = (b.double() * scaling).to(
                        self.device, self.dtype)
                    adapted.add(fused)
        self.adapted[index] = frozenset(adapted)

    def write(self, index: int, adapter) -> None:
        """Slot `index` rewritten in place for an adapter loaded or unloaded while serving
        (engine thread, between steps): `adapter` a models/adapters.py AdapterWeights, or
        None to clear the slot. The tensors stay the same objects, so a captured step
        reads the new weights without a recapture; on CUDA the copies are queued on the
        stream the steps run on, so the next step sees them whole."""
        if adapter is None:
            self.clear(index)
        else:
            self.install(index, adapter.layers, adapter.spec.scaling)

    def clear(self, index: int) -> None:
        """Zero slot `index` (a slot that no row reads: between loads)."""
        for layer in self.a + self.b:
            for t in layer.values():
                t[index].zero_()
        self.adapted[index] = frozenset()

    def device_index(self, adapters: torch.Tensor) -> torch.Tensor:
        """Row adapter indices with -1 (the base model) mapped to the zero entry."""
        return torch.where(adapters < 0, torch.full_like(adapters, self.base_index), adapters)


# Kernels for the indexed path: (x [M, in], idx [M], a [N+1, S*R, in]) -> s [M, S*R] and
# (y [M, out] updated in place, s, idx, b [N+1, out, R], slices, R) -> None.
Shrink = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
Expand = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                   Sequence[tuple[int, int]], int], None]


def gather_shrink(x: torch.Tensor, idx: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """The indexed shrink in plain torch (a gather of each row's A and a batched matmul):
    what the Triton kernel computes, for where Triton does not run."""
    return torch.bmm(a[idx], x.unsqueeze(-1)).squeeze(-1)


def gather_expand(y: torch.Tensor, s: torch.Tensor, idx: torch.Tensor, b: torch.Tensor,
                  slices: Sequence[tuple[int, int]], rank: int) -> None:
    """The indexed expand in plain torch, added into y in place."""
    for j, (off, n) in enumerate(slices):
        part = torch.bmm(b[idx, off:off + n], s[:, j * rank:(j + 1) * rank].unsqueeze(-1))
        y[:, off:off + n] += part.squeeze(-1).to(y.dtype)


class LoraRows:
    """Which rows of one forward run on which adapter, and `add`, which applies their
    updates to a projection's output (module docstring). Build with `grouped` (rows known on
    the host) or `indexed` (a device tensor of indices)."""

    def __init__(self, pool: LoraPool, groups: list[tuple[int, torch.Tensor | slice]] | None,
                 index: torch.Tensor | None, shrink: Shrink = gather_shrink,
                 expand: Expand = gather_expand) -> None:
        self.pool, self.groups, self.index = pool, groups, index
        self._shrink, self._expand = shrink, expand

    @classmethod
    def grouped(cls, pool: LoraPool | None, adapters: Sequence[int] | np.ndarray,
                repeat: int = 1) -> "LoraRows | None":
        """Rows (each of `adapters` repeated `repeat` times: a prompt's tokens) grouped by
        adapter; None when no row has one (the step runs exactly as without LoRA)."""
        if pool is None:
            return None
        ids = np.repeat(np.asarray(adapters, np.int64), repeat)
        if not (ids >= 0).any():
            return None
        groups: list[tuple[int, torch.Tensor | slice]] = []
        for n in np.unique(ids[ids >= 0]).tolist():
            if not pool.adapted[n]:
                continue  # an adapter that adapts nothing (or a freed slot): no update
            rows = np.flatnonzero(ids == n)
            if len(rows) == len(ids):
                groups.append((n, slice(None)))
            else:
                groups.append((n, torch.as_tensor(rows, device=pool.device)))
        return cls(pool, groups, None) if groups else None

    @classmethod
    def indexed(cls, pool: LoraPool, adapters: torch.Tensor, shrink: Shrink = gather_shrink,
                expand: Expand = gather_expand) -> "LoraRows":
        """Rows whose adapter indices (-1 = base) are the device tensor `adapters`; the
        shapes never depend on their values (a CUDA graph can hold it)."""
        return cls(pool, None, pool.device_index(adapters), shrink, expand)

    def add(self, layer: int, name: str, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """y (the base output of fused projection `name` of `layer` for input x; any
        leading shape, rows in this LoraRows' order) plus each row's adapter update."""
        pool = self.pool
        x2, y2 = x.reshape(-1, x.shape[-1]), y.view(-1, y.shape[-1])
        a, b, slices, rank = pool.a[layer][name], pool.b[layer][name], pool.slices[name], pool.rank
        if self.groups is None:
            s = self._shrink(x2, self.index, a)
            self._expand(y2, s, self.index, b, slices, rank)
            return y
        for n, rows in self.groups:
            if name not in pool.adapted[n]:
                continue
            xs = x2[rows]
            s = rows_matmul(xs, a[n].T)  # batch-invariant (engine/model/invariant.py)
            delta = torch.cat([rows_matmul(s[:, j * rank:(j + 1) * rank].contiguous(),
                                           b[n, off:off + width].T)
                               for j, (off, width) in enumerate(slices)], dim=-1)
            if isinstance(rows, slice):
                y2 += delta
            else:
                y2[rows] += delta
        return y
