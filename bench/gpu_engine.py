"""The graph engine on a real GPU: decode step per batch (bf16 and fp8 weights, CUDA graphs
against the eager reference), its paper floor on the card's measured bandwidth, Hugging Face
transformers' generate with a static cache on the same shapes, graph-against-eager token
parity, the decode-attention kernel against its reference, and SNAC beside the LM.

    python bench/gpu_engine.py --out DIR                     # on a CUDA machine
    python bench/gpu_engine.py --device cpu --tiny --out DIR # the dry run CI executes

Writes DIR/gpu-engine.json (every figure) and DIR/summary.json (the shape BENCHMARKS.md and
issue 28 name, every ACCEPTANCE field present: null with its reason in "missing" where not
measured; scripts/gpu-engine-check.sh adds the server's part with `finish`), both after every
section (and --write-checkpoint before the first), so a run killed mid-way keeps the rest.
Weights are random with the Orpheus-3B shapes (no model hub there); a step's time does not
depend on their values.

Sections (each its own key; one that fails records its error and the rest go on):
  env        card, versions, measured copy bandwidth (bytes read + written per second)
  kernel     Triton decode attention against the torch reference on random KV (error), and
             its time against SDPA over the whole span, per batch at context ~500
  parity     bf16, batch 8, 200 steps, the same seeds: graph (captured) against eager, the
             same step uncaptured against captured, and the torch attention in the graph's
             step against eager: first differing step and the share of identical tokens
  steps      per weight variant (DTYPES: bf16, bf16 without the fused kernels, fp8 rowwise
             and tensorwise) and batch: the graph step (launch + read, one at a time), the
             run-ahead period (next step launched before this one is read), the graph's
             device time alone, and the eager reference step; the paper floor; the same
             step seeded (its batch-invariant graphs), and one seeded row's logits bits
             across the buckets
  kv8        bf16 weights over the FP8 KV cache ("bf16kv8", engine.kv_cache_dtype = fp8)
             beside the bf16 cache: graph step times per batch, cache size, token agreement
  fp8        fp8 against bf16 on the same weights: logits error after a prefill, token
             agreement over the parity run (random weights: see the note in the JSON)
  hf         transformers' LlamaForCausalLM (Orpheus-3B config, bf16, random init),
             generate() with cache_implementation="static" at batch 64, prompt 500
  snac       the codec as the flusher drives it at 256 streams (16-frame chunks with 6 steps
             of context and 5 of lookahead): GPU time per second of all streams' audio
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
import traceback
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from orpheus_svc.core.generation import Generation
from orpheus_svc.core.request import GenerationRequest, SamplingParams
from orpheus_svc.core.scheduler import Scheduler
from orpheus_svc.core.scheduler_settings import SchedulerSettings
from orpheus_svc.core.slots import SlotPool
from orpheus_svc.core.step import StepPlan, StepRow
from orpheus_svc.core.tokens import AUDIO_BASE, FRAME_SECONDS, FRAME_TOKENS, audio_token_id

REALTIME_STEP_MS = FRAME_SECONDS / FRAME_TOKENS * 1000  # 12.19 ms
PROMPT = [128259, 128000, *range(1000, 1030), 128009, 128260, 128261, 128257]


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _free(device):
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _median(xs):
    return round(statistics.median(xs), 4)


# -- models --------------------------------------------------------------------------------

def _weights(tiny: bool, device, dtype, seed=0):
    """Random weights (HF init: N(0, 0.02), norms 1) of the Orpheus-3B shapes (demo width
    with `tiny`), drawn on `device`."""
    from orpheus_svc.models.demo import demo_spec
    from orpheus_svc.models.llama_config import orpheus_3b_spec

    spec = demo_spec() if tiny else orpheus_3b_spec()
    gen = torch.Generator(device=device).manual_seed(seed)
    w = {n: (torch.ones(s, device=device, dtype=dtype) if n.endswith("norm.weight") else
             (torch.randn(s, device=device, generator=gen) * 0.02).to(dtype))
         for n, s in spec.tensor_shapes().items()}
    return spec, w


def _model(tiny, device, dtype, quantization, slots, seq, fp8_gemm="rowwise",
           kv_cache_dtype="auto"):
    from orpheus_svc.engine.model.llama import SlotLlama

    spec, w = _weights(tiny, device, dtype)
    model = SlotLlama(spec, w, num_slots=slots, max_seq_len=seq, device=device, dtype=dtype,
                      quantization=quantization, spare_slots=1, fp8_gemm=fp8_gemm,
                      kv_cache_dtype=kv_cache_dtype)
    del w
    _free(device)
    return model


def _random_kv(model, context_tokens: int):
    """Every slot's KV filled with random values (a step's cost does not depend on them);
    an E4M3 cache with random finite bits (0..0x77: |x| <= 240, never NaN)."""
    gen = torch.Generator(device=model.device).manual_seed(1)
    for t in model.k_cache + model.v_cache:
        if t.dtype == torch.float8_e4m3fn:
            t.view(torch.uint8).random_(0, 0x78, generator=gen)
        else:
            t.normal_(generator=gen)


# -- env -----------------------------------------------------------------------------------

def env(device) -> dict:
    import triton
    out = {"card": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
           "torch": torch.__version__, "triton": triton.__version__,
           "cuda": torch.version.cuda}
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        out.update(sms=p.multi_processor_count, memory_gib=round(p.total_memory / 2**30, 1))
        x = torch.empty(2 * 2**30, dtype=torch.uint8, device=device)
        y = torch.empty_like(x)
        for _ in range(3):
            y.copy_(x)
        _sync(device)
        times = []
        for _ in range(10):
            t = time.perf_counter()
            y.copy_(x)
            _sync(device)
            times.append(time.perf_counter() - t)
        out["copy_bandwidth_gbs"] = round(2 * x.numel() / min(times) / 1e9, 1)
        del x, y
    else:
        out["copy_bandwidth_gbs"] = None
    try:
        import transformers
        out["transformers"] = transformers.__version__
    except ImportError:
        out["transformers"] = None
    return out


# -- kernel --------------------------------------------------------------------------------

def kernel(device, tiny: bool, batches, context: int) -> dict:
    from orpheus_svc.engine.graph.attention import (DecodeAttention, decode_attention_reference,
                                                    splits_for)
    from orpheus_svc.models.demo import demo_spec
    from orpheus_svc.models.llama_config import orpheus_3b_spec

    spec = demo_spec() if tiny else orpheus_3b_spec()
    h, kvh, d = spec.num_attention_heads, spec.num_key_value_heads, spec.head_dim
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float16
    out = {"rel_error": {}, "triton_ms": {}, "sdpa_span_ms": {},
           "uniforms_equal_host": _uniforms_equal_host(device)}
    if device.type != "cuda":
        out["note"] = "no Triton kernel runs on the CPU here (tests run it in Triton's interpreter)"
        return out
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    seq = context + 64
    for b in batches:
        slots = b + 1
        kc = torch.randn((slots, kvh, seq, d), device=device, dtype=dtype)
        vc = torch.randn_like(kc)
        q = torch.randn((b, h, d), device=device, dtype=dtype)
        idx = torch.randperm(slots, device=device)[:b]
        lens = torch.randint(1, seq, (b,), device=device)
        lens[0] = seq  # one full row
        att = DecodeAttention(b, h, kvh, d, splits_for(b, kvh, sms), device, dtype)
        got = att(q, kc, vc, idx, lens).float()
        ref = decode_attention_reference(q.float(), kc.float(), vc.float(), idx, lens)
        out["rel_error"][b] = float((got - ref).norm() / ref.norm())
        lens.fill_(context)
        out["triton_ms"][b] = _time_cuda(lambda: att(q, kc, vc, idx, lens), device)
        keys, values = kc[:b, :, :context], vc[:b, :, :context]
        qg = q.view(b, kvh, h // kvh, d)
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):
            out["sdpa_span_ms"][b] = _time_cuda(
                lambda: torch.nn.functional.scaled_dot_product_attention(qg, keys, values), device)
        del kc, vc
    return out


def _uniforms_equal_host(device) -> bool:
    """The graph's counter-based uniforms (int64 arithmetic on `device`) equal the eager
    backend's (numpy uint64) bit for bit: the same seed draws the same token on both."""
    from orpheus_svc.engine.model.sampling import int64_bits, splitmix_uniform, splitmix_uniform_t

    rng = np.random.default_rng(1)
    seeds = rng.integers(0, 2**64, size=100000, dtype=np.uint64)
    counters = rng.integers(0, 2**64, size=100000, dtype=np.uint64)
    dev = splitmix_uniform_t(torch.from_numpy(int64_bits(seeds)).to(device),
                             torch.from_numpy(int64_bits(counters)).to(device))
    return bool(np.array_equal(dev.cpu().numpy(), splitmix_uniform(seeds, counters)))


def _time_cuda(fn, device, warmup=3, repeat=20) -> float:
    """Median device milliseconds of fn() (CUDA events around each call)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return _median(times)


# -- driving the backends ------------------------------------------------------------------

def _requests(n: int, max_tokens: int):
    return [GenerationRequest(f"s{i}", 0, tuple(PROMPT[:3 + i] + PROMPT[-4:]), max_tokens,
                              SamplingParams(seed=1000 + i)) for i in range(n)]


def drive(backend, requests) -> dict[int, list[int]]:
    """Schedule and step by hand until every request ends: tokens per request index."""
    caps = backend.capabilities
    sched = Scheduler(SlotPool(caps.num_slots, caps.max_seq_len),
                      SchedulerSettings(max_batch_size=len(requests)))
    for i, req in enumerate(requests):
        sched.add(Generation(gen_id=i, request=req, arrival=0.0, seed=req.sampling.seed))
    tokens: dict[int, list[int]] = {}
    while sched.has_work:
        plan = sched.schedule(0.0)
        result = backend.step(plan)
        for gid, toks in result.tokens.items():
            tokens.setdefault(gid, []).extend(toks)
        if result.decode_tokens is not None:
            for gid, tok in zip(plan.decode.gen_ids.tolist(), result.decode_tokens.tolist()):
                tokens.setdefault(gid, []).append(tok)
        sched.update(plan, result, 0.0)
    return tokens


def agreement(a: dict, b: dict) -> dict:
    """First differing step per row and over all rows; share of identical tokens and frames."""
    firsts, same, total, frames_same, frames = [], 0, 0, 0, 0
    for gid in sorted(a):
        x, y = a[gid], b.get(gid, [])
        n = min(len(x), len(y))
        diff = next((i for i in range(n) if x[i] != y[i]), None if len(x) == len(y) else n)
        firsts.append(diff)
        same += sum(1 for i in range(n) if x[i] == y[i])
        total += max(len(x), len(y))
        for f in range(n // FRAME_TOKENS):
            frames += 1
            frames_same += x[f * 7:f * 7 + 7] == y[f * 7:f * 7 + 7]
    known = [f for f in firsts if f is not None]
    return {"identical": all(f is None for f in firsts),
            "first_difference": min(known) if known else None,
            "first_difference_per_row": firsts,
            "token_share_identical": round(same / max(total, 1), 4),
            "frame_share_identical": round(frames_same / max(frames, 1), 4)}


def _decode_rows(b: int, k: int, context: int) -> np.ndarray:
    """Rows 0..b-1 at step k of a mid-utterance stretch (buckets.INPUT_ROWS order)."""
    pos = context + k
    return np.stack([np.arange(b), np.full(b, pos), np.full(b, (pos + 1) % 7),
                     np.zeros(b), np.full(b, k + 1)]).astype(np.int64)


def graph_times(backend, b: int, context: int, steps: int) -> dict:
    """The graph step of b rows: one at a time (launch + read), run-ahead, device alone;
    and the same step seeded (engine/model/invariant.py: its own graphs), one at a time
    and its device time alone."""
    runner, device = backend.runner, backend.model.device
    k = 0
    for _ in range(3):
        runner.collect(runner.launch([], _decode_rows(b, k, context)))
        runner.collect(runner.launch([], _decode_rows(b, k, context), invariant=True))
        k += 1
    times, seeded = [], []
    for _ in range(steps):  # unseeded and seeded alternated: the same window for both
        t = time.perf_counter()
        runner.collect(runner.launch([], _decode_rows(b, k, context)))
        times.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        runner.collect(runner.launch([], _decode_rows(b, k, context), invariant=True))
        seeded.append((time.perf_counter() - t) * 1000)
        k += 1
    out = {"step_ms": _median(times), "seeded_step_ms": _median(seeded)}
    # run-ahead: launch k+1 before reading k (what EngineLoop does: Scheduler.schedule with the step in flight)
    _sync(device)
    t = time.perf_counter()
    pending = runner.launch([], _decode_rows(b, k, context))
    for _ in range(steps - 1):
        k += 1
        nxt = runner.launch([], _decode_rows(b, k, context))
        runner.collect(pending)
        pending = nxt
    runner.collect(pending)
    out["ahead_ms"] = round((time.perf_counter() - t) * 1000 / steps, 4)
    graph = runner.graphs.get((b, False))
    if graph is not None:  # the graph alone, replayed back to back (no host in between)
        out["device_ms"] = _time_cuda(graph.replay, device, warmup=2, repeat=steps)
        out["seeded_device_ms"] = _time_cuda(runner.graphs[b, True].replay, device,
                                             warmup=2, repeat=steps)
    return out


def seeded_row_identity(runner, context: int) -> dict:
    """One seeded row's logits across batch sizes 1 .. the slots (engine/model/invariant.py):
    the step's own functions (decode_hidden, step_logits) run in invariant_step with the
    runner's attention kernel at INVARIANT_SPLITS, the row at a random place among random
    rows (other slots, other lengths). identical: its logits the same bits at every size."""
    from orpheus_svc.engine.graph.attention import (INVARIANT_SPLITS, DecodeAttention,
                                                    decode_attention_reference)
    from orpheus_svc.engine.graph.step import decode_hidden, step_logits
    from orpheus_svc.engine.model.invariant import invariant_step

    model, device = runner.model, runner.device
    spec = model.spec
    rng = np.random.default_rng(5)
    target, pos = 0, context - 7
    want, moved = None, []
    sizes = [b for b in (1, 2, 3, 5, 8, 16, 17, 33, 64, 100, 128, 256) if b <= model.num_slots]
    for b in sizes:
        attend = decode_attention_reference if runner.kernel != "triton" else DecodeAttention(
            b, spec.num_attention_heads, spec.num_key_value_heads, spec.head_dim,
            INVARIANT_SPLITS, device, model.dtype)
        at = int(rng.integers(b))
        slots = rng.permutation(np.arange(1, model.num_slots + 1))[:b]  # the dummy too
        positions = rng.integers(1, context, b)
        slots[at], positions[at] = target, pos
        ids = rng.integers(AUDIO_BASE, AUDIO_BASE + 7 * 4096, b)
        ids[at] = AUDIO_BASE + 17
        t = lambda a: torch.as_tensor(a, dtype=torch.long, device=device)  # noqa: E731
        fpos = t(positions % FRAME_TOKENS)
        with torch.inference_mode(), invariant_step():
            hidden = decode_hidden(model, t(ids), t(slots), t(positions), attend,
                                   runner.ops, None)
            logits = step_logits(model, hidden, fpos, t(positions % FRAME_TOKENS == 0))
        row = logits[at].float().cpu()
        if want is None:
            want = row
        elif not torch.equal(row, want):
            moved.append(b)
    return {"batch_sizes": sizes, "identical": not moved, "differs_in": moved}


def eager_time(backend, b: int, context: int, steps: int) -> float:
    """The eager reference (TorchBackend) decode step of b rows, forward and sampling."""
    device = backend.model.device
    sampling = SamplingParams()
    k = iter(range(10**6))

    def one():
        i = next(k)
        pos = context + 3 + i
        rows = [StepRow(gen_id=s, slot=s, request=SimpleNamespace(sampling=sampling, adapter=-1),
                        seed=s + 1, prefill=False, num_generated=i + 1,
                        last_token=audio_token_id(pos % 7, (s * 31 + i) % 4096), position=pos,
                        frame_position=(pos + 1) % 7, stop_allowed=False) for s in range(b)]
        backend.step(StepPlan(0, decode=rows))
    for _ in range(2):
        one()
    _sync(device)
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        one()
        _sync(device)
        times.append((time.perf_counter() - t) * 1000)
    return _median(times)


# The LM head rows a step reads: the 7 x 4096 audio rows and the stop row (the grammar
# allows nothing else; engine/graph/step.py choose_tokens).
HEAD_ROWS_READ = 7 * 4096 + 1


def floor_ms(spec, dtype_name: str, batch: int, context: int, bandwidth_gbs: float | None):
    """The paper floor of a step: every weight it reads, read once (the LM head's audio
    and stop rows in bf16, about 176 MB for Orpheus-3B, not its whole 964 MB as issue 28's
    floor counted; the layers in bf16 or fp8) plus every row's KV, over the card's measured
    copy bandwidth (issue 32: the floor corrected to the restricted head)."""
    head = spec.vocab_size * spec.hidden_size
    layers = spec.num_parameters() - head
    weight_bytes = (HEAD_ROWS_READ * spec.hidden_size * 2
                    + layers * (1 if dtype_name == "fp8" else 2))  # quantization
    kv = batch * context * spec.kv_bytes_per_token(2)
    if not bandwidth_gbs:
        return None, weight_bytes + kv
    return round((weight_bytes + kv) / (bandwidth_gbs * 1e9) * 1000, 3), weight_bytes + kv


# weight dtypes timed by `steps`: name -> (quantization, fp8 gemm)
# (quantization, fp8 gemm, the step's small operations: engine/graph/fused.py)
DTYPES = {"bf16": ("none", "rowwise", "auto"), "bf16u": ("none", "rowwise", "torch"),
          "fp8": ("fp8", "rowwise", "auto"), "fp8t": ("fp8", "tensorwise", "auto")}
# their names in summary.json (fp8 and fp8t: the faster is "fp8", see summary())
SUMMARY_NAMES = {"bf16": "bf16", "bf16u": "bf16_unfused", "fp8": "fp8", "fp8t": "fp8t"}


def steps(device, tiny, batches, context, steps_n, bandwidth, results, dtypes=("bf16", "fp8")
          ) -> dict:
    from gpu_parity import teacher_forced

    from orpheus_svc.engine.graph.backend import GraphBackend
    from orpheus_svc.engine.graph.nodes import count_step_nodes
    from orpheus_svc.engine.torch.backend import TorchBackend
    from orpheus_svc.engine.model.sampling import constrained_logits

    cuda = device.type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    slots = max(batches)
    seq = context + steps_n * 3 + 300
    out: dict = {"context": context, "realtime_step_ms": round(REALTIME_STEP_MS, 3)}
    prefill_logits = {}
    parity_tokens = {}
    for qname in dtypes:
        quant, gemm, fused = DTYPES[qname]
        t0 = time.perf_counter()
        model = _model(tiny, device, dtype, quant, slots, seq, gemm)
        r: dict = {"weight_bytes": model.weight_bytes, "kv_cache_gib":
                   round(model.kv_cache_bytes / 2**30, 2), "build_s": None}
        eager = TorchBackend(model)
        buckets = sorted(set(batches) | {8})
        t = time.perf_counter()
        # only the buckets timed here (the server captures all of them)
        graph = GraphBackend(model, max(buckets), graphs=cuda, buckets=buckets, fused=fused)
        r["fused"] = graph.runner.ops.name
        r["capture_s"] = round(time.perf_counter() - t, 2)
        r["capture_mib"] = round(graph.runner.capture_bytes / 2**20, 1)
        r["build_s"] = round(time.perf_counter() - t0, 2)
        # parity (bf16 for the acceptance; fp8 for the agreement with bf16)
        reqs = _requests(8, results.get("parity_steps", 200))
        ref = drive(eager, reqs)
        got = drive(graph, reqs)
        par = {"graph_vs_eager": agreement(ref, got)}
        if qname == "bf16":  # the same step on two models with their own caches
            twin = _model(tiny, device, dtype, quant, 8, seq, gemm)
            par["teacher_forced"] = teacher_forced(twin, graph.runner, steps=min(
                200, results.get("parity_steps", 200)), rows=8)
            del twin
            _free(device)
        r["graph_nodes"] = count_step_nodes(graph.runner, 8)
        # the kernels per step at every timed bucket (fp8: the path each bucket runs, chosen
        # at start-up by timing on CUDA: engine/graph/fp8_paths.py)
        r["graph_nodes_by_bucket"] = {b: count_step_nodes(graph.runner, b)["total"]
                                      for b in buckets}
        r["fp8_paths"] = getattr(graph.runner, "fp8_paths", None)
        if qname == "bf16":
            if cuda:  # on the CPU nothing is captured: no comparison to make (and none named)
                uncaptured = GraphBackend(model, 8, graphs=False)
                par["uncaptured_vs_captured"] = agreement(drive(uncaptured, reqs), got)
                del uncaptured
            else:
                par["uncaptured_vs_captured"] = {"skipped": "no CUDA graphs on the CPU"}
            torch_kernel = GraphBackend(model, 8, graphs=False, kernel="torch")
            par["torch_attention_graph_step_vs_eager"] = agreement(ref, drive(torch_kernel, reqs))
            del torch_kernel
        r["parity"] = par
        parity_tokens[qname] = got
        hidden = model.prefill([0], [PROMPT])
        prefill_logits[qname] = constrained_logits(hidden, model.lm_head, [0], [False]).float().cpu()
        # timing at context ~500: random KV in every slot
        _random_kv(model, context)
        r["graph"], r["eager_ms"], r["floor_ms"], r["floor_bytes"] = {}, {}, {}, {}
        r["seeded_row"] = seeded_row_identity(graph.runner, context)
        for b in batches:
            r["graph"][b] = graph_times(graph, b, context, steps_n)
            r["eager_ms"][b] = eager_time(eager, b, context, max(5, steps_n // 3))
            r["floor_ms"][b], r["floor_bytes"][b] = floor_ms(model.spec, quant, b, context,
                                                             bandwidth)
            print(f"  {qname} batch {b}: {r['graph'][b]} eager {r['eager_ms'][b]} ms "
                  f"floor {r['floor_ms'][b]} ms", file=sys.stderr, flush=True)
        if cuda:
            r["peak_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
        out[qname] = r
        del eager, graph, model, hidden
        _free(device)
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
    b = prefill_logits.get("bf16")
    for q in [q for q in dtypes if q != "bf16" and b is not None]:
        a = prefill_logits[q]
        out[f"{q}_vs_bf16"] = {
            "prefill_logits_rel_error": float((a[:, :4096] - b[:, :4096]).norm()
                                              / b[:, :4096].norm()),
            "prefill_top1_same": bool(a.argmax() == b.argmax()),
            "tokens": agreement(parity_tokens["bf16"], parity_tokens[q]),
            "note": "random weights give near-uniform logits, so any rounding moves a draw: "
                    "token agreement here is a lower bound; the logits error is the measure"}
    return out


def kv8(device, tiny, batches, context, steps_n, parity_steps) -> dict:
    """bf16 weights with the FP8 KV cache (engine.kv_cache_dtype = fp8, "bf16kv8") beside
    the bf16 KV cache, the graph step only (the eager reference refuses an FP8 cache): per
    batch the step times of graph_times at context ~context, the caches' size, and the
    tokens of the same seeded requests on both (random weights: a lower bound, as the fp8
    section says). Expected on an H200 (paper): a step reads every row's KV once, 114,688
    bytes a token in bf16 for Orpheus-3B and half of it in E4M3: at context 500 the
    floor (floor_ms) drops from 9.48 to 7.65 GB at batch 64 (-19%) and from 20.5 to
    13.2 GB at batch 256 (-36%); at batch 1 it does not move (28 MB of KV)."""
    from orpheus_svc.engine.graph.backend import GraphBackend

    cuda = device.type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    slots = max(batches)
    seq = context + steps_n * 3 + 300
    out: dict = {"context": context}
    tokens = {}
    for name, kv in (("bf16", "auto"), ("bf16kv8", "fp8")):
        model = _model(tiny, device, dtype, "none", slots, seq, kv_cache_dtype=kv)
        buckets = sorted(set(batches) | {8})
        graph = GraphBackend(model, max(buckets), graphs=cuda, buckets=buckets)
        r: dict = {"kv_cache_gib": round(model.kv_cache_bytes / 2**30, 3),
                   "kv_element_bytes": model.kv_element_bytes,
                   "attention": graph.runner.kernel, "fused": graph.runner.ops.name}
        tokens[name] = drive(graph, _requests(8, parity_steps))
        _random_kv(model, context)
        r["graph"] = {b: graph_times(graph, b, context, steps_n) for b in batches}
        print(f"  kv8 {name}: {r['graph']}", file=sys.stderr, flush=True)
        out[name] = r
        del graph, model
        _free(device)
    out["step_ms_ratio"] = {b: round(out["bf16kv8"]["graph"][b]["step_ms"]
                                     / out["bf16"]["graph"][b]["step_ms"], 3) for b in batches}
    out["bf16kv8_vs_bf16"] = {"tokens": agreement(tokens["bf16"], tokens["bf16kv8"]),
                              "note": "random weights give near-uniform logits, so any "
                                      "rounding moves a draw: a lower bound"}
    return out


def fp8gemm(device, tiny, batches) -> dict:
    """Each layer GEMM of the model alone, per batch: bf16, the E4M3 quantisation of the
    activations alone, and each fp8 gemm with it (device milliseconds)."""
    from orpheus_svc.engine.model.linear import Fp8Linear, Linear, quantize_rows
    from orpheus_svc.models.demo import demo_spec
    from orpheus_svc.models.llama_config import orpheus_3b_spec

    if device.type != "cuda":
        return {"note": "CUDA only"}
    s = demo_spec() if tiny else orpheus_3b_spec()
    h, kv = s.hidden_size, s.num_key_value_heads * s.head_dim
    shapes = {"qkv": (s.q_dim + 2 * kv, h), "o": (h, s.q_dim),
              "gate_up": (2 * s.intermediate_size, h), "down": (h, s.intermediate_size)}
    out: dict = {}
    for name, (n, k) in shapes.items():
        w = torch.randn((n, k), device=device, dtype=torch.bfloat16) * 0.02
        layers = {"bf16": Linear(w), "rowwise": Fp8Linear(w, torch.bfloat16, "rowwise"),
                  "tensorwise": Fp8Linear(w, torch.bfloat16, "tensorwise")}
        r: dict = {}
        for m in batches:
            x = torch.randn((m, k), device=device, dtype=torch.bfloat16)
            r[m] = {lname: _time_cuda(lambda lin=lin: lin(x), device)
                    for lname, lin in layers.items()}
            r[m]["quantize"] = _time_cuda(lambda: quantize_rows(x), device)
            ref = x.float() @ w.float().T
            for lname in ("rowwise", "tensorwise"):
                r[m][f"{lname}_rel_error"] = round(float(
                    (layers[lname](x).float() - ref).norm() / ref.norm()), 5)
        out[name] = r
    return out


# -- Hugging Face --------------------------------------------------------------------------

def hf(device, tiny, batch: int, context: int, new_tokens: int) -> dict:
    from transformers import LlamaConfig, LlamaForCausalLM
    import transformers

    from orpheus_svc.models.demo import demo_spec
    from orpheus_svc.models.llama_config import orpheus_3b_spec

    s = demo_spec() if tiny else orpheus_3b_spec()
    cfg = LlamaConfig(hidden_size=s.hidden_size, intermediate_size=s.intermediate_size,
                      num_hidden_layers=s.num_hidden_layers,
                      num_attention_heads=s.num_attention_heads,
                      num_key_value_heads=s.num_key_value_heads, head_dim=s.head_dim,
                      vocab_size=s.vocab_size, rms_norm_eps=s.rms_norm_eps,
                      rope_theta=s.rope_theta, rope_scaling=dict(s.rope_scaling or {}) or None,
                      max_position_embeddings=s.max_position_embeddings,
                      tie_word_embeddings=True, bos_token_id=128000, eos_token_id=128258,
                      pad_token_id=128263)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    prev = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = LlamaForCausalLM(cfg).eval()
    finally:
        torch.set_default_dtype(prev)
    ids = torch.randint(AUDIO_BASE, AUDIO_BASE + 28672, (batch, context), device=device)

    def gen(n):
        _sync(device)
        t = time.perf_counter()
        with torch.inference_mode():
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                           min_new_tokens=n, do_sample=True, temperature=0.6, top_p=0.8,
                           repetition_penalty=1.1, cache_implementation="static",
                           disable_compile=True)
        _sync(device)
        return time.perf_counter() - t
    gen(2)  # warm-up
    one = min(gen(1) for _ in range(2))
    many = gen(new_tokens + 1)
    step_s = (many - one) / new_tokens
    out = {"transformers": transformers.__version__, "batch": batch, "context": context,
           "new_tokens": new_tokens, "prefill_and_first_s": round(one, 3),
           "step_ms": round(step_s * 1000, 3),
           "tokens_per_s": round(batch / step_s, 1),
           "how": "generate(cache_implementation='static', disable_compile=True, sampling "
                  "0.6/0.8/1.1), bf16; per-token time = (time for n+1 new tokens - time "
                  "for 1) / n"}
    del model
    _free(device)
    return out


# -- SNAC ----------------------------------------------------------------------------------

def snac(device, windows=(16, 64), streams: int = 256) -> dict:
    import tempfile

    from orpheus_svc.audio.codec import load_snac, write_random_snac
    from orpheus_svc.audio.settings import FlusherSettings, HOP

    fs = FlusherSettings()
    chunk = fs.max_chunk_samples // HOP            # latent steps kept per window
    ctx, ahead = fs.left_context_samples // HOP, fs.lookahead_samples // HOP
    steps_ = ctx + chunk + ahead
    frames = -(-steps_ // 4)
    windows_per_s = streams * (1 / FRAME_SECONDS) * 4 / chunk  # steady state
    out = {"streams": streams, "window_steps": steps_, "kept_steps": chunk,
           "windows_per_s": round(windows_per_s, 1), "ms": {}, "gpu_share_at_streams": {}}
    cuda = device.type == "cuda"  # the dry run only checks the code path
    variants = [("fp32", torch.float32, False), ("bf16", torch.bfloat16, False)]
    if cuda:  # cuDNN's autotuner: the flusher's window shapes repeat
        variants += [("fp32_cudnn_benchmark", torch.float32, True),
                     ("bf16_cudnn_benchmark", torch.bfloat16, True)]
    lo = ctx * HOP
    pcm = {}
    with tempfile.TemporaryDirectory() as d:
        path = write_random_snac(Path(d) / "snac", seed=3)
        for name, dt, autotune in variants:
            torch.backends.cudnn.benchmark = autotune
            codec = load_snac(path, device=device, dtype=dt, noise=True)
            rng = np.random.default_rng(0)
            for w in windows:
                batch = [rng.integers(0, 4096, size=(frames, 7)) for _ in range(w)]
                z = codec.latents(batch)[..., :steps_]

                def call():
                    codec.decode_latents(z, keep=(lo, lo + chunk * HOP))
                for _ in range(3 if cuda else 1):
                    call()
                _sync(device)
                times = []
                for _ in range(10 if cuda else 2):
                    t = time.perf_counter()
                    call()
                    _sync(device)
                    times.append((time.perf_counter() - t) * 1000)
                ms = _median(times)
                out["ms"][f"{name}_{w}x{steps_}steps"] = ms
                out["gpu_share_at_streams"][f"{name}_{w}"] = round(windows_per_s * ms / w / 1000, 3)
            if not autotune:  # the same windows without noise, to compare the dtypes' PCM
                pcm[name] = codec.decode_latents(z, keep=(lo, lo + chunk * HOP), noise=False)
            del codec
    torch.backends.cudnn.benchmark = False
    ref, low = pcm["fp32"].astype(np.float64), pcm["bf16"].astype(np.float64)
    out["bf16_snr_db_vs_fp32"] = round(float(10 * np.log10(np.sum(ref ** 2)
                                                           / max(np.sum((low - ref) ** 2), 1e-30))), 1)
    out["note"] = ("steady-state 16-frame chunks only (the first chunks of each utterance are "
                   "smaller and cost more per frame); eager codec, as the flusher runs it; "
                   "share = GPU seconds per second for `streams` real-time streams; the SNR "
                   "is on random-init weights (indicative only)")
    return out


# -- main ----------------------------------------------------------------------------------

def _write_json(path: Path, obj) -> None:
    """Whole or not at all (a run killed mid-write keeps the previous file)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=str) + "\n")
    tmp.replace(path)


# The acceptance's fields (issue 45 item 5): every one in summary.json, null with a reason in
# "missing" where it could not be measured. A type: "number", or "map" (a dict of weight
# variant -> number, bool or {batch: number or null}; parity's two numbers).
ACCEPTANCE = {
    "server_step_ratio": "number",   # the server's step period / the graph's device step
    "snac_gpu_share": "number",      # 1 - null-codec step period / codec step period
    "ahead_share": "number",         # the server's steps launched ahead (engine/ahead.py)
    "graph_nodes": "map",            # kernels in the step at 8 rows, per weight variant
    "parity": "map",                 # teacher-forced top-1 agreement, max |logit diff|
    "step_ms": "map", "device_ms": "map",
    "seeded_step_ms": "map", "seeded_device_ms": "map", "seeded_row_identical": "map",
}


def _leaves(v):
    if isinstance(v, dict):
        for x in v.values():
            yield from _leaves(x)
    else:
        yield v


def complete(out: dict, why: dict | None = None) -> dict:
    """Every ACCEPTANCE field present: one not measured (absent, empty, or all its figures
    null) is null with its reason in out["missing"] ("field: why"); a map with some nulls
    (seeded_device_ms on the CPU) stays, its reason listed too."""
    why = dict(why or {})
    missing = [m for m in out.get("missing", []) if m.split(":")[0] not in ACCEPTANCE]
    for key in ACCEPTANCE:
        v = out.get(key)
        leaves = list(_leaves(v)) if isinstance(v, dict) else [v]
        if v == {} or all(x is None for x in leaves):
            out[key] = None
        if out[key] is None or any(x is None for x in leaves):
            cpu = key.endswith("device_ms") and out.get("card") == "cpu-dry-run"
            reason = why.get(key) or ("no CUDA graphs on the CPU" if cpu else
                                      "not measured (its section failed, was skipped or "
                                      "timed out: see gpu-engine.json)")
            missing.append(f"{key}: {reason}")
    out["missing"] = missing
    return out


SERVER_PART = {k: "the server's part (scripts/gpu-engine-check.sh) has not run yet"
               for k in ("server_step_ratio", "snac_gpu_share", "ahead_share")}


def _server_rows(path: Path, weights: str, null_codec: bool) -> list:
    """orpheus-bench's rows, with the server's own step counters per level (steps over the
    level's wall time, tokens per step: bench/orpheus_bench's `server` block)."""
    rows = []
    for r in json.loads(path.read_text())["runs"]:
        sv = r.get("server") or {}
        sps = sv.get("steps_per_s")
        rows.append({
            "sessions": r["concurrency"], "ttfb_p95_ms": round(r["ttfb_ms"]["p95"], 1),
            "sessions_underran": r["underruns"]["sessions_with_underrun"],
            "ok": r["succeeded"] == r["sessions"], "succeeded": r["succeeded"],
            "requests": r["sessions"], "slo_pass": r["slo"]["pass"],
            "weights": weights, "null_codec": null_codec,
            "step_period_ms": round(1000 / sps, 3) if sps else None,
            "mean_batch": round(sv["mean_batch"], 1) if sv.get("mean_batch") else None,
            "server_steps": sv.get("steps")})
    return rows


def _ratio_level(rows: list) -> dict | None:
    """The level the acceptance names (128 sessions), else the largest measured."""
    timed = [r for r in rows if r.get("step_period_ms") and r.get("mean_batch")]
    at128 = [r for r in timed if r["sessions"] == 128]
    return at128[0] if at128 else max(timed, key=lambda r: r["sessions"], default=None)


def finish(out_dir, weights: str = "none rowwise", null_codec: bool = False) -> dict:
    """The server's part of summary.json (scripts/gpu-engine-check.sh, after the server
    runs): its rows (serve.summary.json; serve-null.summary.json from the null-codec pass),
    server_step_ratio, snac_gpu_share, ahead_share; every acceptance field present."""
    import ast
    import re
    out = Path(out_dir)
    path = out / "summary.json"
    summary_ = json.loads(path.read_text()) if path.is_file() else {"card": "unknown"}
    why: dict = {}
    serve, null = out / "serve.summary.json", out / "serve-null.summary.json"
    rows = _server_rows(serve, weights, null_codec) if serve.is_file() else []
    nulls = _server_rows(null, weights, True) if null.is_file() else []
    summary_["server"] = rows + nulls
    codec_rows = [r for r in rows if not r["null_codec"]]
    summary_["server_step_ratio"] = summary_["snac_gpu_share"] = None
    level = _ratio_level(codec_rows or rows)
    if level is None:
        why["server_step_ratio"] = ("no server step counters (serve.summary.json absent: "
                                    "SERVE=0, no checkpoint, or the server did not start)")
    else:
        # the graph's device time alone at the bench's batch nearest the server's mean
        # batch (the step time, launch + read, where nothing was captured: the CPU)
        name = "bf16" if weights.startswith("none") else "fp8"
        dev = (summary_.get("device_ms") or {}).get(name) or {}
        basis = "device_ms" if any(v for v in dev.values()) else "step_ms"
        per = {int(b): v for b, v in ((summary_.get(basis) or {}).get(name) or {}).items() if v}
        if per:
            b = min(per, key=lambda b: (abs(b - level["mean_batch"]), b))
            summary_["server_step_ratio"] = round(level["step_period_ms"] / per[b], 3)
            summary_["server_step"] = {
                "sessions": level["sessions"], "step_period_ms": level["step_period_ms"],
                "mean_batch": level["mean_batch"], "bench_batch": b, "weights": name,
                "basis": basis, "bench_ms": per[b],
                "null_codec": level["null_codec"]}
        else:
            why["server_step_ratio"] = f"no bench step time for {name} (steps section)"
    pair = [(c, n) for c in codec_rows for n in nulls if c["sessions"] == n["sessions"]
            and c["step_period_ms"] and n["step_period_ms"]]
    if pair:
        c, n = next(((c, n) for c, n in pair if c["sessions"] == 128), pair[-1])
        summary_["snac_gpu_share"] = round(1 - n["step_period_ms"] / c["step_period_ms"], 3)
        summary_["snac_step"] = {"sessions": c["sessions"], "codec_ms": c["step_period_ms"],
                                 "null_codec_ms": n["step_period_ms"]}
    else:
        why["snac_gpu_share"] = ("needs a codec and a null-codec server pass at the same "
                                 "level (SNAC_SHARE=1 runs both)")
    steps_txt = out / "server-steps.txt"
    ahead = [line for line in steps_txt.read_text().splitlines() if "run-ahead:" in line] \
        if steps_txt.is_file() else []
    summary_.setdefault("ahead_share", None)
    if ahead:  # the last record of the whole run: "... in all {'steps': .., 'share': ..}"
        record = ast.literal_eval(re.search(r"in all (\{.*\})", ahead[-1]).group(1))
        summary_["ahead_share"] = record["share"]
        summary_["ahead"] = record
    else:
        why["ahead_share"] = "no run-ahead record in the server's log (server-steps.txt)"
    complete(summary_, why)
    _write_json(path, summary_)
    return summary_


def summary(doc: dict) -> dict:
    """The shape issue 28 names (the server rows are added by gpu-engine-check.sh)."""
    st = doc.get("steps", {})
    card = doc.get("env", {}).get("card", "unknown")
    out = {"card": card if doc.get("device") == "cuda" else "cpu-dry-run",
           "step_ms": {}, "ahead_ms": {}, "device_ms": {}, "eager_step_ms": {}, "floor_ms": {},
           "seeded_step_ms": {}, "seeded_device_ms": {}, "seeded_row_identical": {},
           "hf_tokens_per_s": doc.get("hf", {}).get("tokens_per_s"),
           "ours_tokens_per_s": None, "server": []}
    fp8 = [q for q in ("fp8", "fp8t") if st.get(q, {}).get("graph")]
    if fp8:  # the summary's fp8 is the faster fp8 gemm at the largest batch
        big = max(st[fp8[0]]["graph"], key=int)
        best = min(fp8, key=lambda q: st[q]["graph"][big]["step_ms"])
        out["fp8_gemm"] = DTYPES[best][1]
    out["fused"] = {SUMMARY_NAMES[q]: st[q].get("fused") for q in DTYPES if st.get(q)}
    # issue 32: the step's kernels (engine/graph/nodes.py, at 8 rows) and the teacher-forced
    # parity of the bf16 graph step against the eager one (bench/gpu_parity.py)
    out["graph_nodes"] = {SUMMARY_NAMES[q]: st[q]["graph_nodes"]["total"] for q in DTYPES
                          if st.get(q, {}).get("graph_nodes")}
    out["graph_nodes_by_bucket"] = {SUMMARY_NAMES[q]: st[q]["graph_nodes_by_bucket"]
                                    for q in DTYPES if st.get(q, {}).get("graph_nodes_by_bucket")}
    out["fp8_paths"] = {SUMMARY_NAMES[q]: st[q]["fp8_paths"] for q in DTYPES
                        if st.get(q, {}).get("fp8_paths")}
    tf = (st.get("bf16") or {}).get("parity", {}).get("teacher_forced") or {}
    out["parity"] = {k: tf.get(k) for k in ("top1_agreement", "max_abs_logit_diff")}
    for q in ("bf16", "bf16u", "fp8", "fp8t"):
        r = st.get(q) or {}
        if q == "bf16u" and not r:
            continue
        g = r.get("graph", {})
        name = SUMMARY_NAMES[q]
        out["step_ms"][name] = {b: v["step_ms"] for b, v in g.items()}
        out["ahead_ms"][name] = {b: v["ahead_ms"] for b, v in g.items()}
        out["device_ms"][name] = {b: v.get("device_ms") for b, v in g.items()}
        out["seeded_step_ms"][name] = {b: v.get("seeded_step_ms") for b, v in g.items()}
        out["seeded_device_ms"][name] = {b: v.get("seeded_device_ms") for b, v in g.items()}
        out["seeded_row_identical"][name] = (r.get("seeded_row") or {}).get("identical")
        out["eager_step_ms"][name] = r.get("eager_ms", {})
        out["floor_ms"][name] = r.get("floor_ms", {})
    keys = ("step_ms", "ahead_ms", "device_ms", "eager_step_ms", "floor_ms", "seeded_step_ms",
            "seeded_device_ms", "seeded_row_identical")
    if fp8 and best == "fp8t":  # name the faster one fp8, keep the other under its own name
        for key in keys:
            out[key]["fp8_rowwise"] = out[key].pop("fp8")
            out[key]["fp8"] = out[key].pop("fp8t")
    else:
        for key in keys:
            out[key]["fp8_tensorwise"] = out[key].pop("fp8t")
    ran = {n for n, v in out["step_ms"].items() if v}  # the variants this run measured
    for key in keys:
        out[key] = {n: v for n, v in out[key].items() if n in ran}
    b64 = (st.get("bf16") or {}).get("graph", {}).get(64 if doc.get("device") == "cuda" else 8)
    if b64:
        rows = 64 if doc.get("device") == "cuda" else 8
        out["ours_tokens_per_s"] = round(rows / (b64["step_ms"] / 1000), 1)
    return out


def _unknown(name):
    def run(*_):
        raise ValueError(f"unknown section {name}")
    return run


class _Sections(dict):
    """name -> fn(device, args, doc, batches); an unknown name raises in its own section."""

    def __missing__(self, name):
        return _unknown(name)


SECTIONS = _Sections({
    "env": lambda device, a, doc, batches: env(device),
    "kernel": lambda device, a, doc, batches: kernel(device, a.tiny, batches, a.context),
    "steps": lambda device, a, doc, batches: steps(
        device, a.tiny, batches, a.context, a.steps, doc.get("env", {}).get("copy_bandwidth_gbs"),
        {"parity_steps": a.parity_steps}, a.dtypes.split(",")),
    "fp8gemm": lambda device, a, doc, batches: fp8gemm(device, a.tiny, batches),
    "kv8": lambda device, a, doc, batches: kv8(device, a.tiny, batches, a.context, a.steps,
                                               a.parity_steps),
    "hf": lambda device, a, doc, batches: hf(device, a.tiny, a.hf_batch, a.context, 16),
    "snac": lambda device, a, doc, batches: snac(device, [int(w) for w in
                                                          a.snac_windows.split(",")]),
})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="demo width (the CPU dry run)")
    ap.add_argument("--batches", default="1,64,256")
    ap.add_argument("--context", type=int, default=500)
    ap.add_argument("--steps", type=int, default=20, help="timed steps per batch")
    ap.add_argument("--parity-steps", type=int, default=200)
    ap.add_argument("--hf-batch", type=int, default=64)
    ap.add_argument("--snac-windows", default="16,64", help="windows per SNAC call timed")
    ap.add_argument("--sections", default="env,kernel,fp8gemm,steps,kv8,hf,snac")
    ap.add_argument("--dtypes", default="bf16,bf16u,fp8,fp8t",
                    help=f"of {', '.join(DTYPES)} (bf16u: bf16 without the fused kernels)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--write-checkpoint", metavar="DIR",
                    help="also write a random bf16 checkpoint of these shapes to DIR (HF layout)")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    batches = [int(b) for b in args.batches.split(",")]
    doc: dict = {"device": device.type, "args": vars(args)}

    def write() -> None:  # after every section: a killed run leaves what it had measured
        _write_json(out_dir / "gpu-engine.json", doc)
        _write_json(out_dir / "summary.json", complete(summary(doc), SERVER_PART))

    write()
    if args.write_checkpoint:  # first: the server step runs on it even if a section hangs
        from orpheus_svc.models.loader import write_checkpoint
        from orpheus_svc.models.tokenizer import build_byte_level_tokenizer_json
        t = time.perf_counter()
        spec, w = _weights(args.tiny, device, torch.bfloat16)
        write_checkpoint(args.write_checkpoint, spec, {n: x.cpu() for n, x in w.items()},
                         build_byte_level_tokenizer_json(), max_shard_bytes=2 * 10**9)
        doc["checkpoint"] = {"dir": args.write_checkpoint,
                             "section_s": round(time.perf_counter() - t, 1)}
        del w
        _free(device)
        write()
    for name in args.sections.split(","):
        t = time.perf_counter()
        print(f"== {name} ({time.strftime('%H:%M:%S')})", file=sys.stderr, flush=True)
        try:
            doc[name] = SECTIONS[name](device, args, doc, batches)
        except Exception as exc:  # one broken path must not hide the rest
            traceback.print_exc()
            doc[name] = {"error": f"{type(exc).__name__}: {exc}"}
        doc[name]["section_s"] = round(time.perf_counter() - t, 1)
        write()
        _free(device)
    print(json.dumps(complete(summary(doc), SERVER_PART), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
