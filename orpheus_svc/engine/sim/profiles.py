"""GPU timing profiles for the `sim` backend: a roofline model of Orpheus-3B steps. Pure Python.

The derivation, the sources of every figure and what the model leaves out are in
docs/capacity.md; this module is the same arithmetic in code. One engine step runs
`decode` rows (one token each, at their own context length) and `prefill` rows (a whole
prompt each) in one batched forward. Its time is

    t = overhead
      + max(linear_bytes / BW,  linear_flops / FLOPS)     weight GEMMs: weights read once
      + max(attn_bytes   / BW,  attn_flops   / FLOPS)     attention: every row reads its KV
      + logits_bytes / BW                                 LM-head output + sampling passes

    BW    = paper peak memory bandwidth x bandwidth_efficiency  (both per profile)
    FLOPS = paper dense peak at the weight precision x flops_efficiency

    linear_bytes = layer params x weight bytes + LM-head params x head bytes
    linear_flops = 2 x layer params x (decode rows + prefill tokens)
                 + 2 x LM-head params x (decode rows + prefill rows)   (last prompt token only)
    attn_bytes   = KV bytes per token x (sum of decode contexts + prefill tokens written)
    attn_flops   = 4 x layers x q_dim x (sum of decode contexts + sum of prompt^2 / 2)
    logits_bytes = rows x vocab x 4 B x 3 passes (fp32 logits written, then top-p sampling)

A served-step profile (h200-server) adds what the server spends beyond the device
(GpuProfile.served_extra_seconds, fitted by bench/sim_fit.py):

    t += prefill_launch_s + prefill_token_s x prefill_tokens       (steps holding a prompt)
       + max(host_step_s + host_row_s x rows - device part, 0)     (host work run-ahead hides)

The "figures" below are the real Orpheus-3B shapes (Llama-3.2-3B, tied embeddings: see
orpheus_svc.models.llama_config.orpheus_3b_spec; a test keeps them equal). The SNAC codec
cost is a per-call launch cost plus a per-frame price (codec_call_s + frames x
codec_s_per_frame): per-frame cost falls with batch size, which is the sublinear batching
the flusher exploits; see docs/capacity.md for where the per-frame FLOPs come from.
"""

from __future__ import annotations

from dataclasses import dataclass

from orpheus_svc.models.llama_config import orpheus_3b_spec

# -- Orpheus-3B shapes (Llama-3.2-3B with the 156,940-id Orpheus vocabulary), from the one
# place they are written: models/llama_config.py orpheus_3b_spec ------------------------------
_SPEC = orpheus_3b_spec()
LAYERS = _SPEC.num_hidden_layers
Q_DIM = _SPEC.q_dim
VOCAB = _SPEC.vocab_size
HEAD_PARAMS = VOCAB * _SPEC.hidden_size  # tied with the embedding; read as the LM head each step
# q, k, v, o projections + gate, up, down + two RMSNorm weights per layer, + the final norm
LAYER_PARAMS = _SPEC.num_parameters() - HEAD_PARAMS
KV_BYTES_PER_TOKEN = _SPEC.kv_bytes_per_token(2)  # K and V, FP16 KV cache: 114,688 B

# LoRA (docs/lora.md): one adapter of rank r adds r x (in + out) parameters per adapted
# projection; every projection of every layer, as a full adapter does:
_P = {"q": (_SPEC.hidden_size, _SPEC.q_dim), "k": (_SPEC.hidden_size, _SPEC.kv_dim),
      "v": (_SPEC.hidden_size, _SPEC.kv_dim), "o": (_SPEC.q_dim, _SPEC.hidden_size),
      "gate": (_SPEC.hidden_size, _SPEC.intermediate_size),
      "up": (_SPEC.hidden_size, _SPEC.intermediate_size),
      "down": (_SPEC.intermediate_size, _SPEC.hidden_size)}
LORA_PARAMS_PER_RANK = LAYERS * sum(i + o for i, o in _P.values())  # 1.52 M for Orpheus-3B
LORA_BYTES_PER_PARAM = 2  # the pool is in the model's 16-bit dtype
# a shrink and an expand per fused projection (qkv, o, gate_up, down) per layer: the graph
# engine replays them in every step once a pool exists, rows on adapters or not
LORA_KERNELS = 2 * 4 * LAYERS

LOGIT_BYTES = 4
LOGIT_PASSES = 3

# SNAC 24 kHz decoder: multiply-adds of one frame (4 latent steps -> 2048 samples), from
# torch.utils.flop_counter on the real architecture (convolutions; elementwise ops left out).
SNAC_FLOPS_PER_FRAME = 0.828e9


@dataclass(frozen=True)
class GpuProfile:
    """One GPU + precision: paper peaks, assumed efficiencies, fixed costs (docs/capacity.md)."""

    name: str
    gpu: str
    mem_bandwidth: float          # bytes/s, paper peak
    peak_flops: float             # FLOP/s, dense, at the GEMM precision of the weights
    memory_bytes: float           # device memory
    weight_bytes_per_param: float  # transformer layers (FP8 = 1, INT4 + group scales ~ 0.52)
    head_bytes_per_param: float   # LM head (kept in BF16 by the FP8 / INT4 recipes)
    step_overhead_s: float        # host scheduling + launch per step (assumed)
    bandwidth_efficiency: float = 0.80
    flops_efficiency: float = 0.60
    codec_peak_flops: float = 0.0  # FP16 dense, for SNAC
    codec_efficiency: float = 0.10
    codec_call_s: float = 0.6e-3   # per SNAC decode call: ~70 small kernels from eager torch
    lora_kernel_s: float = 3e-6    # per gathered LoRA kernel in a CUDA graph (paper)
    # What a served step costs beyond the device's roofline (0 in a device-only profile):
    # a step holding any prompt pays prefill_launch_s once and prefill_token_s per prompt
    # token (an eager prefill the captured step waits for), and the host's work for the
    # step, host_step_s + host_row_s x rows, runs beside the device's and shows only where
    # it is the longer of the two (run-ahead hides it up to the device's time).
    prefill_launch_s: float = 0.0
    prefill_token_s: float = 0.0
    host_step_s: float = 0.0
    host_row_s: float = 0.0
    notes: str = ""

    @property
    def bandwidth(self) -> float:
        return self.mem_bandwidth * self.bandwidth_efficiency

    @property
    def flops(self) -> float:
        return self.peak_flops * self.flops_efficiency

    @property
    def weight_bytes(self) -> float:
        return LAYER_PARAMS * self.weight_bytes_per_param + HEAD_PARAMS * self.head_bytes_per_param

    @property
    def codec_s_per_frame(self) -> float:
        return SNAC_FLOPS_PER_FRAME / (self.codec_peak_flops * self.codec_efficiency)

    # -- the model --------------------------------------------------------------------------

    def step_seconds(self, decode_rows: int, decode_context: int, prefill_rows: int = 0,
                     prefill_tokens: int = 0, prefill_sq: int = 0) -> float:
        """Modelled time of one step.

        decode_context: sum over decode rows of the tokens already in their KV (prompt +
        generated); prefill_tokens: sum of prompt lengths; prefill_sq: sum of squared
        prompt lengths (causal attention cost). 0 rows -> 0 s.
        """
        rows = decode_rows + prefill_rows
        if rows == 0:
            return 0.0
        bw, fl = self.bandwidth, self.flops
        linear_tokens = decode_rows + prefill_tokens
        linear = max(self.weight_bytes / bw,
                     (2 * LAYER_PARAMS * linear_tokens + 2 * HEAD_PARAMS * rows) / fl)
        attn_flops = 4 * LAYERS * Q_DIM * (decode_context + prefill_sq / 2)
        attn_bytes = KV_BYTES_PER_TOKEN * (decode_context + prefill_tokens)
        attn = max(attn_bytes / bw, attn_flops / fl)
        logits = rows * VOCAB * LOGIT_BYTES * LOGIT_PASSES / bw
        device = self.step_overhead_s + linear + attn + logits
        return device + self.served_extra_seconds(device, rows, prefill_rows, prefill_tokens)

    def served_extra_seconds(self, device_s: float, rows: int, prefill_rows: int = 0,
                             prefill_tokens: int = 0) -> float:
        """What a step of `rows` rows whose device time is `device_s` costs in the server
        beyond it: the prefill launch and tokens (when it holds a prompt) and the host's
        work past `device_s`. 0 for a device-only profile."""
        prefill = (self.prefill_launch_s + self.prefill_token_s * prefill_tokens
                   if prefill_rows else 0.0)
        return prefill + max(self.host_step_s + self.host_row_s * rows - device_s, 0.0)

    def prefix_copy_seconds(self, tokens: int) -> float:
        """What copying `tokens` tokens of a pooled prefix's KV into slots costs: each read
        once and written once, at the profile's bandwidth (paper)."""
        return 2 * KV_BYTES_PER_TOKEN * tokens / self.bandwidth

    def lora_seconds(self, adapters: int, lora_tokens: int, rank: int) -> float:
        """What a step's LoRA adds (paper, docs/lora.md): every distinct adapter in the step
        read once (rank x LORA_PARAMS_PER_RANK 16-bit values; a lower rank is padded to the
        pool's `rank`), 4 FLOPs per parameter per token on an adapter (shrink and expand),
        and the gathered kernels' fixed cost. rank 0 (no pool): 0 s."""
        if rank <= 0:
            return 0.0
        params = rank * LORA_PARAMS_PER_RANK
        weights = adapters * params * LORA_BYTES_PER_PARAM / self.bandwidth
        flops = 2 * params * lora_tokens / self.flops
        return LORA_KERNELS * self.lora_kernel_s + max(weights, flops)

    def decode_seconds(self, batch: int, mean_context: float) -> float:
        """A pure-decode step of `batch` rows at `mean_context` tokens each."""
        return self.step_seconds(batch, int(batch * mean_context))

    def codec_seconds(self, frames: float, calls: int = 1) -> float:
        """SNAC decode time of `frames` frames (windows x frames, context included) in `calls` calls."""
        if frames <= 0:
            return 0.0
        return calls * self.codec_call_s + frames * self.codec_s_per_frame

    def model_ttfb_seconds(self, batch: int, mean_context: float, prompt_tokens: int,
                           first_window_frames: float = 1.0) -> float:
        """GPU time on the critical path to a new session's first audio at a steady batch.

        Half a step of alignment (the step in flight when it arrives), one step with its
        prefill, six decode steps (7 tokens = frame 0), and one codec call for the first
        chunk. The rest of a measured TTFB is the server's own (queueing, Python, network).
        """
        decode = self.decode_seconds(max(batch, 1), mean_context)
        with_prefill = self.step_seconds(max(batch - 1, 0), int(max(batch - 1, 0) * mean_context),
                                         1, prompt_tokens, prompt_tokens * prompt_tokens)
        return 0.5 * decode + with_prefill + 6 * decode + self.codec_seconds(first_window_frames)

    def realtime_batch(self, mean_context: float, tokens_per_second: float = 7 / (2048 / 24000)
                       ) -> int:
        """Largest batch whose pure-decode step keeps every row at real time (82.03 tok/s)."""
        budget = 1.0 / tokens_per_second
        lo, hi = 0, 1
        while self.decode_seconds(hi, mean_context) <= budget:
            lo, hi = hi, hi * 2
            if hi > 1 << 20:
                return lo
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.decode_seconds(mid, mean_context) <= budget:
                lo = mid
            else:
                hi = mid
        return lo

    def kv_bytes(self, tokens: int) -> float:
        return tokens * KV_BYTES_PER_TOKEN


TB = 1e12
GB = 1e9

PROFILES: dict[str, GpuProfile] = {
    p.name: p for p in (
        GpuProfile(
            name="h100-fp8", gpu="NVIDIA H100 SXM5 80 GB",
            mem_bandwidth=3.35 * TB,           # HBM3, H100 datasheet
            peak_flops=1979 * TB,             # FP8 tensor, dense (3958 with sparsity)
            memory_bytes=80 * GB,
            weight_bytes_per_param=1.0, head_bytes_per_param=2.0,
            step_overhead_s=0.8e-3,
            codec_peak_flops=989 * TB,        # FP16/BF16 tensor, dense
            notes="paper: TensorRT-LLM FP8 weights (LM head BF16), FP16 KV cache; never "
                  "run here. Our graph engine measured on an H200 is 1.3-1.9x slower than "
                  "this model (h200-bf16; docs/capacity.md)"),
        # Measured, not paper: this project's graph engine (engine/graph: CUDA graphs,
        # Triton decode attention, run-ahead) on one H200, bf16 weights and KV, random
        # weights of the Orpheus-3B shapes, context 500 (bench/results/gpu-engine-h200/).
        # Peaks are the datasheet's; the efficiencies and the fixed cost are fitted to the
        # measured device time of the graph step at batch 1, 64 and 256 (4.19 / 6.03 / 10.42
        # ms; this model: 4.28 / 5.83 / 10.67, within 4%). The fixed 1.5 ms is the step's ~560
        # small kernels (norms, RoPE, residuals), the 50% bandwidth its GEMVs and attention.
        # SNAC: the codec as served (fp32, eager) measured at 16 and 64 windows of 16 kept
        # frames: 64 us per frame, 1.3% of the FP16 peak.
        GpuProfile(
            name="h200-bf16", gpu="NVIDIA H200 141 GB",
            mem_bandwidth=4.8 * TB,            # HBM3e, H200 datasheet (4.2 TB/s copy measured)
            peak_flops=989 * TB,              # BF16 tensor, dense
            memory_bytes=141 * GB,
            weight_bytes_per_param=2.0, head_bytes_per_param=2.0,
            step_overhead_s=1.5e-3, bandwidth_efficiency=0.50, flops_efficiency=0.60,
            codec_peak_flops=989 * TB, codec_efficiency=0.013,
            notes="measured: the graph engine, bf16 weights and KV, on an H200"),
        # The same engine with FP8 weights (E4M3, per-row scales, torch._scaled_mm rowwise)
        # in the same run: 5.48 / 7.89 / 12.15 ms at batch 1 / 64 / 256 (this model: 5.78 /
        # 7.51 / 12.77, within 6%). Slower than bf16: the per-token activation quantiser and
        # the FP8 GEMM at these small batches cost more than the halved weight bytes save.
        GpuProfile(
            name="h200-fp8", gpu="NVIDIA H200 141 GB",
            mem_bandwidth=4.8 * TB,
            peak_flops=1979 * TB,             # FP8 tensor, dense
            memory_bytes=141 * GB,
            weight_bytes_per_param=1.0, head_bytes_per_param=2.0,
            step_overhead_s=4.0e-3, bandwidth_efficiency=0.45, flops_efficiency=0.50,
            codec_peak_flops=989 * TB, codec_efficiency=0.013,
            notes="measured: the graph engine, fp8 weights (rowwise), bf16 KV, on an H200"),
        # The H200 run's server, not its graph alone: h200-bf16's device time plus the
        # served-step terms fitted by bench/sim_fit.py to the real server under
        # orpheus-bench at 128 and 256 playout-paced sessions (bench/results/
        # gpu-engine-h200/serve.summary.json, code 34e4dff: an eager prefill beside the
        # captured step). prefill_token_s: the batched prefill of gpu-engine.json's `hf`
        # section (0.407 s for 64 x 500 tokens) less the roofline's price of it. The host's
        # work per step: 0.94 x the engine thread's CPU per step in that run (1.34 ms +
        # 58.7 us per row), shown where it outlasts the device. prefill_launch_s: 50 ms
        # per step holding a prompt. Simulated on a virtual clock (bench/orpheus_bench/
        # simserve.py) the run's step period and TTFB p95 come out within 8% at both
        # levels (tests/bench/test_simserve.py). For the server of that commit; the
        # current graph engine prefills inside its captured step, which this launch cost
        # does not price.
        GpuProfile(
            name="h200-server", gpu="NVIDIA H200 141 GB",
            mem_bandwidth=4.8 * TB, peak_flops=989 * TB, memory_bytes=141 * GB,
            weight_bytes_per_param=2.0, head_bytes_per_param=2.0,
            step_overhead_s=1.5e-3, bandwidth_efficiency=0.50, flops_efficiency=0.60,
            codec_peak_flops=989 * TB, codec_efficiency=0.013,
            prefill_launch_s=0.050, prefill_token_s=3.022e-6,
            host_step_s=1.256e-3, host_row_s=55.05e-6,
            notes="fitted: the H200 run's server (graph engine, bf16, eager prefill) at "
                  "128 and 256 sessions; h200-bf16 plus prefill and host terms"),
        GpuProfile(
            name="rtx4090-fp8", gpu="NVIDIA GeForce RTX 4090 24 GB",
            mem_bandwidth=1.008 * TB,          # GDDR6X 21 Gbps x 384 bit, Ada whitepaper
            peak_flops=165.2 * TB,            # FP8 tensor with FP32 accumulate, dense
            memory_bytes=24 * GB,
            weight_bytes_per_param=1.0, head_bytes_per_param=2.0,
            step_overhead_s=0.8e-3,
            codec_peak_flops=165.2 * TB,      # FP16 tensor with FP16 accumulate, dense
            notes="TensorRT-LLM FP8 weights (LM head BF16), FP16 KV cache"),
        GpuProfile(
            name="a100-int4", gpu="NVIDIA A100 SXM4 80 GB",
            mem_bandwidth=2.039 * TB,          # HBM2e, A100 80GB datasheet
            peak_flops=312 * TB,              # BF16/FP16 tensor, dense (W4A16 computes in FP16)
            memory_bytes=80 * GB,
            weight_bytes_per_param=0.5 + 2 / 128,  # INT4 + one FP16 scale per group of 128
            head_bytes_per_param=2.0,
            step_overhead_s=0.8e-3,
            codec_peak_flops=312 * TB,
            notes="INT4 weight-only (AWQ-style W4A16), FP16 KV cache; the seeds warn INT4 "
                  "flattens prosody: for comparison only"),
    )
}


def get_profile(name: str) -> GpuProfile:
    """The named profile; KeyError listing the known names otherwise."""
    try:
        return PROFILES[name]
    except KeyError:
        raise KeyError(f"unknown sim profile {name!r} (known: {', '.join(PROFILES)})") from None
