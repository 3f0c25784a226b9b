"""Reference Llama over a preallocated KV slot pool (torch, CPU or CUDA).

The KV cache is allocated once: per layer K and V of shape [slots, kv_heads, max_seq_len,
head_dim]. Each slot holds one generation at its own position, so one decode forward
advances any subset of slots, each at a different sequence index:

    slot 0  [p p p p p a a a a . . . . .]   pos 7   <- decode writes K/V at its own
    slot 1  [p p p a a a a a a a a . . .]   pos 10     position and attends to 0..pos
    slot 2  [p p p p p p p p . . . . . .]   pos 7      (p = prompt, a = audio token)

Prefill of new generations pads their prompts on the right to one length; the padded
K/V rows are never attended (the decode mask stops at the slot's own position) and are
overwritten by later decode steps.

Only hidden states come out of forward(); the LM head lives in sampling.py, which computes
just the rows the audio grammar allows.

LoRA adapters (engine/model/lora.py): with a pool (`lora`, engine.max_adapters), prefill
and decode take each row's adapter index (-1 = the base model) and every fused projection
adds its rows' low-rank updates, so rows on different adapters share one forward.

Attention on CUDA uses the memory-efficient kernel (else math), never cuDNN's: cuDNN builds
an execution plan for every new shape, and the key span grows by one every decode step, so
each step would pay for a new plan, in host time several times the step's GPU work. Decode
folds grouped-query attention into the query (one token per row: [B, heads, 1, d] is
[B, kv_heads, group, d]), so no kernel needs GQA support and K/V are never repeated.
"""

from __future__ import annotations

import contextlib
import logging
import math
from typing import Mapping, Sequence

import torch
import torch.nn.functional as F

from orpheus_svc.engine.model.invariant import (
    PROMPT_BLOCK, invariant_step, prompt_groups, round_up, rows_attention,
)
from orpheus_svc.engine.model.kv_fp8 import CALIBRATION_TOKENS, KV_DTYPES, scale_for
from orpheus_svc.engine.model.linear import make_linear
from orpheus_svc.engine.model.lora import LoraPool, LoraRows
from orpheus_svc.models.llama_config import LlamaSpec

log = logging.getLogger(__name__)


def rope_inv_freq(spec: LlamaSpec) -> torch.Tensor:
    """Inverse RoPE frequencies, with Llama-3 long-context scaling when configured."""
    hd = spec.head_dim
    inv_freq = 1.0 / (spec.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    sc = spec.rope_scaling
    if not sc:
        return inv_freq
    factor, low, high = sc["factor"], sc["low_freq_factor"], sc["high_freq_factor"]
    old_ctx = sc["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    # long wavelengths are slowed by `factor`, short ones kept, the band between blended
    scaled = torch.where(wavelen > old_ctx / low, inv_freq / factor, inv_freq)
    smooth = (old_ctx / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old_ctx / high) & (wavelen <= old_ctx / low)
    return torch.where(medium, blended, scaled)


def sdpa_kernels(device: torch.device):
    """The attention kernels SDPA may pick on `device`: on CUDA memory-efficient, else math
    (see the module docstring); None on the CPU (torch's own choice)."""
    if device.type != "cuda":
        return None
    from torch.nn.attention import SDPBackend
    return [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding (Llama's rotate-half form); cos and sin broadcast against x."""
    return x * cos + _rotate_half(x) * sin


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Llama's RMSNorm: normalised in float32, cast back, then scaled by the weight."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


class SlotLlama:
    """Llama forward passes over a KV slot pool. Not thread-safe: one owner (the engine thread)."""

    def __init__(self, spec: LlamaSpec, weights: Mapping[str, torch.Tensor], *, num_slots: int,
                 max_seq_len: int, device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32, quantization: str = "none",
                 spare_slots: int = 0, fp8_gemm: str = "rowwise", max_adapters: int = 0,
                 max_lora_rank: int = 0, kv_cache_dtype: str = "auto") -> None:
        """`quantization`: "none" (weights in `dtype`) or "fp8" (engine/model/linear.py; the
        embedding, the norms and the LM head stay in `dtype`). `spare_slots`: KV slots
        allocated beyond `num_slots` for the owner's own use (the graph engine's dummy
        slot, which padded batch rows write to). `fp8_gemm`: Fp8Linear's gemm.
        `max_adapters` > 0: a LoRA pool of that many adapters of rank <= `max_lora_rank`
        (engine/model/lora.py), in `dtype` whatever the quantization. `kv_cache_dtype`:
        "auto" (K/V in `dtype`) or "fp8" (E4M3 with per-(slot, kv head) scales calibrated
        here, engine/model/kv_fp8.py: the graph engine's step reads and writes it; this
        class's own prefill and decode refuse it)."""
        self.spec = spec
        self.device = torch.device(device)
        self.dtype = dtype
        self.num_slots = num_slots
        self.max_seq_len = max_seq_len
        w = {k: v.to(self.device, dtype) for k, v in weights.items()}
        self.embed = w["model.embed_tokens.weight"]
        self.lm_head = self.embed if spec.tie_word_embeddings else w["lm_head.weight"]
        self.final_norm = w["model.norm.weight"]
        self.quantization = quantization
        self.layers = []
        for i in range(spec.num_hidden_layers):
            p = f"model.layers.{i}."
            linear = lambda *names: make_linear(  # noqa: E731
                torch.cat([w.pop(p + n + ".weight") for n in names]), quantization, dtype,
                fp8_gemm)
            # q, k, v fused into one matmul; gate and up likewise
            self.layers.append(dict(
                qkv=linear("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
                o=linear("self_attn.o_proj"),
                gate_up=linear("mlp.gate_proj", "mlp.up_proj"),
                down=linear("mlp.down_proj"),
                in_norm=w[p + "input_layernorm.weight"],
                post_norm=w[p + "post_attention_layernorm.weight"],
            ))
        freqs = torch.outer(torch.arange(max_seq_len, dtype=torch.float64), rope_inv_freq(spec))
        emb = torch.cat((freqs, freqs), dim=-1)
        self.cos = emb.cos().to(self.device, dtype)
        self.sin = emb.sin().to(self.device, dtype)
        self.lora = LoraPool(spec, max_adapters, max_lora_rank, self.device, dtype) \
            if max_adapters > 0 else None
        # Attributes so bench/gpu_torch.py can time the alternatives on a GPU.
        self.sdpa_kernels = sdpa_kernels(self.device)
        self.grouped_decode = True
        if kv_cache_dtype not in KV_DTYPES:
            raise ValueError(f"kv_cache_dtype {kv_cache_dtype!r}: must be auto or fp8")
        self.kv_fp8 = kv_cache_dtype == "fp8"
        slots_all = num_slots + spare_slots
        kv_shape = (slots_all, spec.num_key_value_heads, max_seq_len, spec.head_dim)
        # per layer [slots, kv_heads] float32 (kv_fp8.py); None with K/V in `dtype`
        self.k_scale = self.v_scale = None
        if self.kv_fp8:
            k_amax, v_amax = self._calibration_amax()
            self.k_scale = [scale_for(a).expand(slots_all, -1).contiguous() for a in k_amax]
            self.v_scale = [scale_for(a).expand(slots_all, -1).contiguous() for a in v_amax]
        kv_dtype = torch.float8_e4m3fn if self.kv_fp8 else dtype
        self.k_cache = [torch.zeros(kv_shape, device=self.device, dtype=kv_dtype)
                        for _ in range(spec.num_hidden_layers)]
        self.v_cache = [torch.zeros(kv_shape, device=self.device, dtype=kv_dtype)
                        for _ in range(spec.num_hidden_layers)]
        log.info("kv cache preallocated: %d layers x 2 x %d kv_heads x %d head_dim x %d max_seq_len"
                 " x %d slots x %d bytes = %d bytes; weights (%s) %d bytes",
                 spec.num_hidden_layers, spec.num_key_value_heads, spec.head_dim, max_seq_len,
                 num_slots + spare_slots, self.kv_element_bytes, self.kv_cache_bytes,
                 quantization, self.weight_bytes)

    def _calibration_amax(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Per layer, each kv head's largest |K| and |V| [kv_heads] over a seeded prompt of
        CALIBRATION_TOKENS random ids, prefilled into a one-slot cache in `dtype`
        (kv_fp8.py says why)."""
        spec, n = self.spec, min(CALIBRATION_TOKENS, self.max_seq_len)
        shape = (1, spec.num_key_value_heads, n, spec.head_dim)
        self.k_cache = [torch.zeros(shape, device=self.device, dtype=self.dtype)
                        for _ in range(spec.num_hidden_layers)]
        self.v_cache = [torch.zeros(shape, device=self.device, dtype=self.dtype)
                        for _ in range(spec.num_hidden_layers)]
        gen = torch.Generator().manual_seed(0)
        ids = torch.randint(0, self.embed.shape[0], (n,), generator=gen).tolist()
        with torch.inference_mode(), self._kernels():
            self._prefill([0], [ids])
        amax = [[c[0].abs().amax(dim=(1, 2)).float() for c in caches]
                for caches in (self.k_cache, self.v_cache)]
        return amax[0], amax[1]

    def kv_scales(self, li: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Layer li's (k_scale, v_scale) [slots, kv_heads] with an FP8 KV cache, else None."""
        return (self.k_scale[li], self.v_scale[li]) if self.kv_fp8 else None

    def _refuse_fp8_kv(self) -> None:
        if self.kv_fp8:
            raise RuntimeError("SlotLlama's own prefill and decode keep K/V in the model "
                               "dtype: an FP8 KV cache is read and written by the graph "
                               "engine's step (engine/graph/step.py)")

    @property
    def kv_bytes_per_token(self) -> int:
        """KV cache bytes one token takes in every layer (K and V)."""
        s = self.spec
        return s.num_hidden_layers * s.num_key_value_heads * s.head_dim * 2 * self.kv_element_bytes

    @property
    def kv_element_bytes(self) -> int:
        return 1 if self.kv_fp8 else torch.tensor([], dtype=self.dtype).element_size()

    @property
    def weight_bytes(self) -> int:
        """Bytes of the layers, the norms and the whole LM head: what a decode step's
        memory-bandwidth floor counts (a decode step reads only the head's 28,672 audio rows
        and its stop row, and gathers a few embedding rows, not counted)."""
        tensors = [self.final_norm, self.lm_head]
        total = sum(t.numel() * t.element_size() for t in tensors)
        for layer in self.layers:
            total += sum(layer[k].nbytes for k in ("qkv", "o", "gate_up", "down"))
            total += sum(layer[k].numel() * layer[k].element_size()
                         for k in ("in_norm", "post_norm"))
        return total

    @property
    def kv_cache_bytes(self) -> int:
        scales = (self.k_scale + self.v_scale) if self.kv_fp8 else []
        return sum(t.numel() * t.element_size() for t in self.k_cache + self.v_cache + scales)

    def _kernels(self):
        if self.sdpa_kernels is None:
            return contextlib.nullcontext()
        from torch.nn.attention import sdpa_kernel
        return sdpa_kernel(self.sdpa_kernels)

    def _rms(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, weight, self.spec.rms_norm_eps)

    @staticmethod
    def _proj(li: int, layer: dict, name: str, x: torch.Tensor,
              lora: LoraRows | None, q=None) -> torch.Tensor:
        """Fused projection `name` of layer `li`, plus the rows' adapter updates; `q`: x
        already quantised for an FP8 projection (linear.py `Fp8Linear.takes_quantized`)."""
        y = layer[name](x) if q is None else layer[name](x, q)
        return y if lora is None else lora.add(li, name, x, y)

    def _qkv(self, li: int, layer: dict, x: torch.Tensor, positions: torch.Tensor,
             lora: LoraRows | None = None):
        """x [B, T, H], positions [B, T] -> q [B, nh, T, hd], k, v [B, kvh, T, hd]."""
        s = self.spec
        bsz, t, _ = x.shape
        qkv = self._proj(li, layer, "qkv", x, lora)
        nq, nkv = s.num_attention_heads * s.head_dim, s.num_key_value_heads * s.head_dim
        q = qkv[..., :nq].view(bsz, t, s.num_attention_heads, s.head_dim).transpose(1, 2)
        k = qkv[..., nq:nq + nkv].view(bsz, t, s.num_key_value_heads, s.head_dim).transpose(1, 2)
        v = qkv[..., nq + nkv:].view(bsz, t, s.num_key_value_heads, s.head_dim).transpose(1, 2)
        cos, sin = self.cos[positions].unsqueeze(1), self.sin[positions].unsqueeze(1)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        return q, k, v

    def _block(self, li: int, layer: dict, x: torch.Tensor, attend,
               lora: LoraRows | None = None) -> torch.Tensor:
        h = self._rms(x, layer["in_norm"])
        x = x + self._proj(li, layer, "o", attend(h), lora)
        h = self._rms(x, layer["post_norm"])
        gate, up = self._proj(li, layer, "gate_up", h, lora).chunk(2, dim=-1)
        return x + self._proj(li, layer, "down", F.silu(gate) * up, lora)

    @torch.inference_mode()
    def prefill(self, slots: Sequence[int], prompts: Sequence[Sequence[int]],
                invariant: Sequence[bool] | None = None,
                adapters: Sequence[int] | None = None,
                starts: Sequence[int] | None = None) -> torch.Tensor:
        """Run prompts into their slots. Returns the final-norm hidden state of each
        prompt's last token, [B, hidden]. `invariant` (per prompt): those prompts' results
        must not depend on the others (invariant.py), so they are run in groups padded to a
        length of their own. `adapters` (per prompt): its LoRA adapter slot, -1 = the base
        model (None: all base). `starts` (per prompt, None: all 0): where the prompt goes
        in its slot; positions below it already hold a prefix's K/V (write_prefix), which
        the prompt attends to."""
        self._refuse_fp8_kv()
        starts = [0] * len(prompts) if starts is None else list(starts)
        groups = prompt_groups([len(p) for p in prompts], invariant, self.max_seq_len)
        with self._kernels():
            if len(groups) == 1:
                return self._prefill(slots, prompts, self._pad(groups[0][1], starts),
                                     adapters, starts)
            out = [None] * len(prompts)
            for members, pad_to in groups:
                pick = lambda xs: [xs[i] for i in members]  # noqa: E731
                hidden = self._prefill(pick(slots), pick(prompts),
                                       self._pad(pad_to, pick(starts)),
                                       None if adapters is None else pick(adapters),
                                       pick(starts))
                for row, i in enumerate(members):
                    out[i] = hidden[row]
            return torch.stack(out)

    def _pad(self, pad_to: int | None, starts: Sequence[int]) -> int | None:
        """An invariant group's padded length, kept inside the slot past its start."""
        return None if pad_to is None else min(pad_to, self.max_seq_len - max(starts))

    @torch.inference_mode()
    def prefix_kv(self, ids: Sequence[int]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The K/V of a prompt prefix on its own (a reference voice's: core/request.py
        prefix_len), per layer [kv_heads, len(ids), head_dim]: prefilled batch-invariant
        in a call of its own, into a one-slot cache of its own, so it is computed exactly as
        a seeded session's step computes the prefix in its slot when no pool holds it."""
        self._refuse_fp8_kv()
        spec, n = self.spec, len(ids)
        # room for the padding of its invariant call (invariant.py prompt_groups)
        shape = (1, spec.num_key_value_heads, round_up(n, PROMPT_BLOCK, self.max_seq_len),
                 spec.head_dim)
        saved = self.k_cache, self.v_cache
        self.k_cache = [torch.zeros(shape, device=self.device, dtype=self.dtype)
                        for _ in range(spec.num_hidden_layers)]
        self.v_cache = [torch.zeros(shape, device=self.device, dtype=self.dtype)
                        for _ in range(spec.num_hidden_layers)]
        try:
            with invariant_step(True):
                self.prefill([0], [list(ids)], [True])
            return ([c[0, :, :n].clone() for c in self.k_cache],
                    [c[0, :, :n].clone() for c in self.v_cache])
        finally:
            self.k_cache, self.v_cache = saved

    def _prefill(self, slots: Sequence[int], prompts: Sequence[Sequence[int]],
                 pad_to: int | None = None, adapters: Sequence[int] | None = None,
                 starts: Sequence[int] | None = None) -> torch.Tensor:
        lengths = [len(p) for p in prompts]
        t = max(lengths) if pad_to is None else pad_to
        starts = [0] * len(prompts) if starts is None else list(starts)
        if max(s + n for s, n in zip(starts, lengths)) > self.max_seq_len:
            raise ValueError(f"prompt of {max(s + n for s, n in zip(starts, lengths))} "
                             f"tokens exceeds max_seq_len {self.max_seq_len}")
        ids = torch.zeros((len(prompts), t), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, :len(p)] = torch.as_tensor(p, dtype=torch.long)
        ids = ids.to(self.device)
        lens = torch.as_tensor(lengths, device=self.device)
        slot_idx = torch.as_tensor(list(slots), device=self.device)
        x = self.embed[ids]
        lora = None if adapters is None else LoraRows.grouped(self.lora, adapters, repeat=t)
        if any(starts):
            attend_at, positions = self._attend_after_prefix(slot_idx, starts, lens, t)
        else:
            attend_at, positions = self._attend_from_zero(slot_idx, lens, t)
        for li, layer in enumerate(self.layers):
            def attend(h, li=li, layer=layer):
                q, k, v = self._qkv(li, layer, h, positions, lora)
                return attend_at(li, q, k, v).transpose(1, 2).reshape(h.shape[0], t, -1)
            x = self._block(li, layer, x, attend, lora)
        last = x[torch.arange(len(prompts), device=self.device), lens - 1]
        return self._rms(last, self.final_norm)

    def _attend_from_zero(self, slot_idx: torch.Tensor, lens: torch.Tensor, t: int):
        """Prompts from position 0: their K/V go to [0, t) of their slots, and they attend
        to their own keys (causal, never a padded one). Returns (attend(li, q, k, v), the
        positions [B, t])."""
        pos = torch.arange(t, device=self.device)
        mask = (pos[None, :] <= pos[:, None])[None] & (pos[None, None, :] < lens[:, None, None])
        mask = mask.unsqueeze(1)  # [B, 1, T, T]

        def attend(li: int, q, k, v):
            self.k_cache[li][slot_idx, :, :t] = k
            self.v_cache[li][slot_idx, :, :t] = v
            return self._sdpa_prefill(q, k, v, mask)
        return attend, pos.expand(len(slot_idx), t)

    def _attend_after_prefix(self, slot_idx: torch.Tensor, starts: Sequence[int],
                             lens: torch.Tensor, t: int):
        """Prompts after a prefix: prompt i's tokens go to starts[i] + [0, t) of its slot,
        and attend to every key of their slot up to their own position, the prefix's
        included. A padding token past the slot's end is put at its last position (never
        a prompt's: fit_to_slot leaves room after every prompt; never attended, rewritten
        by decode). Returns (attend(li, q, k, v), the positions [B, t])."""
        start = torch.as_tensor(list(starts), device=self.device)
        positions = (start[:, None] + torch.arange(t, device=self.device)[None, :]) \
            .clamp(max=self.max_seq_len - 1)
        span = min(max(starts) + t, self.max_seq_len)
        keys = torch.arange(span, device=self.device)
        # [B, 1, T, span]: a key at or before the query, and inside the prompt's real end
        mask = ((keys[None, None, :] <= positions[:, :, None])
                & (keys[None, None, :] < (start + lens)[:, None, None])).unsqueeze(1)
        rows = slot_idx[:, None]

        def attend(li: int, q, k, v):
            kc, vc = self.k_cache[li], self.v_cache[li]
            kc[rows, :, positions] = k.transpose(1, 2)
            vc[rows, :, positions] = v.transpose(1, 2)
            return self._sdpa_prefill(q, kc[slot_idx, :, :span], vc[slot_idx, :, :span], mask)
        return attend, positions

    def _sdpa_prefill(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      mask: torch.Tensor) -> torch.Tensor:
        """q [B, heads, T, d] over k, v [B, kv_heads, S, d] with mask [B, 1, T, S]."""
        if self.sdpa_kernels is None:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        # the memory-efficient kernel has no GQA: repeat K/V (prompts are short)
        group = self.spec.num_attention_heads // self.spec.num_key_value_heads
        return F.scaled_dot_product_attention(q, k.repeat_interleave(group, dim=1),
                                              v.repeat_interleave(group, dim=1),
                                              attn_mask=mask)

    def write_prefix(self, slot: int, k: Sequence[torch.Tensor],
                     v: Sequence[torch.Tensor]) -> None:
        """A prefix's K/V (per layer [kv_heads, n, head_dim]: prefix_kv, or a pool's view)
        into positions [0, n) of `slot`: one device copy per layer and tensor."""
        n = k[0].shape[1]
        for li in range(len(self.layers)):
            self.k_cache[li][slot, :, :n].copy_(k[li], non_blocking=True)
            self.v_cache[li][slot, :, :n].copy_(v[li], non_blocking=True)

    @torch.inference_mode()
    def decode(self, slots: Sequence[int], tokens: Sequence[int],
               positions: Sequence[int], invariant: Sequence[bool] | None = None,
               adapters: Sequence[int] | None = None) -> torch.Tensor:
        """One token per slot, each at its own position. Returns final-norm hidden [B, hidden].
        `invariant` (per row): those rows' results must not depend on the others
        (invariant.py), so the step attends over a span rounded up to fixed block edges.
        `adapters` (per row): its LoRA adapter slot, -1 = the base model (None: all base)."""
        self._refuse_fp8_kv()
        with self._kernels():
            return self._decode(slots, tokens, positions, invariant, adapters)

    def _decode(self, slots: Sequence[int], tokens: Sequence[int],
                positions: Sequence[int], invariant: Sequence[bool] | None = None,
                adapters: Sequence[int] | None = None) -> torch.Tensor:
        bsz = len(slots)
        slot_idx = torch.as_tensor(list(slots), device=self.device)
        # Slots lo..lo+B-1 in order (the backend sorts its batch by slot, and a full batch
        # is exactly that): read K/V through a view instead of gathering a copy per layer.
        lo = slots[0]
        rows = slice(lo, lo + bsz) if list(slots) == list(range(lo, lo + bsz)) else slot_idx
        pos = torch.as_tensor(list(positions), device=self.device)
        if int(max(positions)) + 1 > self.max_seq_len:
            raise ValueError(f"position {int(max(positions))} exceeds max_seq_len "
                             f"{self.max_seq_len}")
        # an invariant step's rows attend over spans of their own (rows_attention)
        span = None if invariant and any(invariant) else max(int(p) + 1 for p in positions)
        x = self.embed[torch.as_tensor(list(tokens), device=self.device)].unsqueeze(1)
        lora = None if adapters is None else LoraRows.grouped(self.lora, adapters)
        for li, layer in enumerate(self.layers):
            def attend(h, li=li, layer=layer):
                q, k, v = self._qkv(li, layer, h, pos[:, None], lora)
                kc, vc = self.k_cache[li], self.v_cache[li]
                kc[slot_idx, :, pos] = k[:, :, 0]
                vc[slot_idx, :, pos] = v[:, :, 0]
                return self._attend(q, kc, vc, rows, pos, span)
            x = self._block(li, layer, x, attend, lora)
        return self._rms(x[:, 0], self.final_norm)

    def _attend(self, q: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, rows,
                pos: torch.Tensor, span: int | None) -> torch.Tensor:
        """Decode attention of q [B, heads, 1, d] over keys 0..pos of the cache rows `rows`
        (a slice of slots or their indices), reading `span` keys: [B, 1, heads * d].
        span None: an invariant step, each row over a span of its own (rows_attention)."""
        bsz = q.shape[0]
        if span is None:
            slots = torch.arange(rows.start, rows.stop, device=self.device) \
                if isinstance(rows, slice) else rows

            def keys_of(row, n):  # fresh copies of the row's keys and values
                s = slots[row:row + 1]
                return kc[s, :, :n], vc[s, :, :n]
            return rows_attention(q, keys_of, pos.tolist(), self.max_seq_len,
                                  self._sdpa_decode).reshape(bsz, 1, -1)
        mask = (torch.arange(span, device=self.device)[None, :] <= pos[:, None])
        mask = mask[:, None, None, :]  # [B, 1, 1, span]
        keys, values = kc[rows, :, :span], vc[rows, :, :span]
        return self._sdpa_decode(q, keys, values, mask).reshape(bsz, 1, -1)

    def _sdpa_decode(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                     mask: torch.Tensor) -> torch.Tensor:
        """q [B, heads, 1, d] over keys/values [B, kv_heads, span, d] with mask [B, 1, 1,
        span]: [B, heads * d] (in Llama's head order)."""
        bsz = q.shape[0]
        kv_heads, hd = self.spec.num_key_value_heads, self.spec.head_dim
        group = self.spec.num_attention_heads // kv_heads
        if self.grouped_decode:
            # head kv * group + r reads K/V head kv (Llama's repeat_kv order), so the
            # group's queries are rows of one kv head: [B, kv_heads, group, d]
            o = F.scaled_dot_product_attention(q.reshape(bsz, kv_heads, group, hd),
                                               keys, values, attn_mask=mask)
            return o.reshape(bsz, -1)
        o = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)
        return o.transpose(1, 2).reshape(bsz, -1)
