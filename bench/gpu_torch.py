"""The CUDA paths of the torch backend and the SNAC codec, checked and timed on a real GPU.

No CI machine has a GPU, so these paths are tested on the CPU only. This script runs them
on CUDA and says whether they compute what the CPU computes, and how fast they are:

    python bench/gpu_torch.py --output gpu.json              # on a CUDA machine
    python bench/gpu_torch.py --device cpu --tiny            # the script's own dry run

Sections (each a key of the JSON it prints):
  parity     the demo checkpoint (tiny width, real vocabulary) in float32 on the CPU and
             on the GPU: SlotLlama's constrained logits after a batched prefill and
             batched decode steps at different positions (relative error), and one
             offline synth through the whole Runtime (engine loop, torch backend, flusher
             on its own CUDA stream, SNAC) with the same seed on both: where the sampled
             tokens first differ (if they do), and the PCM's SNR.
  grammar    the TensorRT-LLM logits processor (engine/trtllm/grammar.py) on CUDA logits,
             with no stream and with a stream pointer as the TensorRT backend hands it:
             every forbidden id is -inf, every allowed id untouched.
  snac       SNAC decode_frames on the GPU (random-init 24 kHz SNAC; timing does not
             depend on the weights): milliseconds per call for windows x frames.
  attention  the same step and prefill per attention variant (VARIANTS): torch's own
             kernel choice (cuDNN's on the H200) against the shipped one.
  decode     Orpheus-3B shapes (random weights; no hub here) in bfloat16 over the KV slot
             pool: one TorchBackend decode step (forward + constrained sampling) per batch
             size at a mid-utterance context, and batched prefill of real-length prompts.
             A row keeps up with real time when the step takes at most 85.3 / 7 = 12.19 ms
             (7 tokens per 85.3 ms frame).

Weights are random (no model hub here), so the audio is noise; the timing of a forward
pass does not depend on the weights' values. Sampling of random weights picks codes
uniformly, which does not change the step's cost either.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from orpheus_svc.core.request import SamplingParams
from orpheus_svc.core.step import StepPlan, StepRow
from orpheus_svc.core.tokens import AUDIO_BASE, FRAME_SECONDS, FRAME_TOKENS, audio_token_id

REALTIME_STEP_MS = FRAME_SECONDS / FRAME_TOKENS * 1000  # 12.19 ms: one row at real time


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _median_ms(fn, device, warmup=3, repeat=15) -> float:
    for _ in range(warmup):
        fn()
    _sync(device)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        _sync(device)
        times.append((time.perf_counter() - t) * 1000)
    return round(statistics.median(times), 3)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double().cpu(), b.double().cpu()
    return float((a - b).norm() / b.norm())


def _snr_db(x: np.ndarray, ref: np.ndarray) -> float:
    err = float(np.sum((x.astype(np.float64) - ref) ** 2))
    return float("inf") if err == 0 else 10 * np.log10(float(np.sum(ref.astype(np.float64) ** 2)) / err)


# -- parity -------------------------------------------------------------------------------

def _llama_logits(device: torch.device) -> list[torch.Tensor]:
    from orpheus_svc.engine.model.llama import SlotLlama
    from orpheus_svc.engine.model.sampling import constrained_logits
    from orpheus_svc.models.demo import demo_spec, random_state_dict

    spec = demo_spec()
    weights = {k: v * 10 if not k.endswith("norm.weight") else v  # logits differ clearly
               for k, v in random_state_dict(spec, 7, dtype=torch.float32).items()}
    model = SlotLlama(spec, weights, num_slots=4, max_seq_len=256, device=device,
                      dtype=torch.float32)
    prompts = [[128259, 128000, *range(5, 30), 128009, 128260, 128261, 128257],
               [128259, 128000, 9, 128009, 128260, 128261, 128257],
               [128259, 128000, *range(40, 52), 128009, 128260, 128261, 128257]]
    out = [constrained_logits(model.prefill([0, 2, 3], prompts), model.lm_head, [0, 0, 0],
                              [True] * 3)]
    positions = [len(p) for p in prompts]
    for step in range(6):
        toks = [audio_token_id(step % 7, (97 * s + 13 * step) % 4096) for s in range(3)]
        hidden = model.decode([0, 2, 3], toks, positions)
        out.append(constrained_logits(hidden, model.lm_head, [(step + 1) % 7] * 3, [True] * 3))
        positions = [p + 1 for p in positions]
    return out


def _synth(device: str, text: str, seed: int):
    """One offline synth through the whole Runtime; returns (result, wall s, the sampled
    tokens in segment order, read off the backend's steps)."""
    from orpheus_svc.config import load_config
    from orpheus_svc.runtime import build_runtime
    from orpheus_svc.synth import synthesize

    config = load_config(overrides={"model.device": device, "model.dtype": "float32",
                                    "engine.max_sessions": 4, "engine.max_seq_len": 2048})
    runtime = build_runtime(config)
    runtime.flusher.codec.noise = False  # SNAC's noise blocks draw fresh noise every call
    backend = runtime.engine.backend
    step, tokens, segment = backend.step, {}, {}

    def recording(plan):
        result = step(plan)
        for row in (*plan.prefill, *plan.decode):
            segment[row.gen_id] = row.request.segment_index
        for gid, new in result.tokens.items():
            tokens.setdefault(gid, []).extend(new)
        return result
    backend.step = recording  # the engine thread calls backend.step(plan) each step
    runtime.start()
    try:
        t = time.perf_counter()
        result = synthesize(runtime, text, seed=seed)
        wall = time.perf_counter() - t
    finally:
        runtime.stop()
    return result, wall, [t for gid in sorted(tokens, key=segment.get) for t in tokens[gid]]


def first_difference(a: list, b: list) -> int | None:
    """Index of the first element where a and b differ (or the shorter one ends); None if equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def parity(device: torch.device) -> dict:
    cpu = _llama_logits(torch.device("cpu"))
    dev = _llama_logits(device)
    errors = [_rel(d, c) for d, c in zip(dev, cpu)]
    text = "Hello there. This is a check of the whole pipeline on the GPU, sentence by sentence."
    ref, _, ref_tokens = _synth("cpu", text, seed=11)
    got, wall, got_tokens = _synth(str(device), text, seed=11)
    same_length = len(got.pcm) == len(ref.pcm)
    return {
        "llama_logits_rel_error_max": max(errors),
        "llama_logits_rel_error_per_step": errors,
        "synth_tokens": [len(ref_tokens), len(got_tokens)],
        "synth_samples": [len(ref.pcm), len(got.pcm)],
        # Random weights give near-uniform logits, so a rounding difference far below the
        # logits' error can move a draw across a neighbour's CDF edge; every later token
        # then differs (its history does). The index says where that first happened.
        "synth_first_token_difference": first_difference(ref_tokens, got_tokens),
        # two runs of the same tokens differ too (the flusher's windows follow timing):
        # about 52-56 dB; far lower means different tokens
        "synth_pcm_snr_db": _snr_db(got.pcm, ref.pcm) if same_length else None,
        "synth_wall_s": round(wall, 3),
    }


# -- grammar ------------------------------------------------------------------------------

def grammar(device: torch.device) -> dict:
    from orpheus_svc.engine.trtllm.grammar import AudioGrammarLogitsProcessor, block_table

    proc = AudioGrammarLogitsProcessor()
    vocab = 156940 + 60  # an engine's LM head padded past the vocabulary
    table = block_table(vocab)
    out = {}
    cases = {"no_stream": None}
    if device.type == "cuda":
        side = torch.cuda.Stream(device)
        cases["stream_ptr"] = side
    for name, stream in cases.items():
        ok = True
        for last, row in ((128257, 0), (audio_token_id(0, 5), 1), (audio_token_id(6, 9), 7)):
            logits = torch.randn((1, 1, vocab), device=device)
            before = logits.clone()
            ptr = None if stream is None else stream.cuda_stream
            if stream is not None:
                stream.wait_stream(torch.cuda.current_stream(device))
            proc(1, logits, [[128259, 5, last]], ptr, None)
            if stream is not None:
                torch.cuda.current_stream(device).wait_stream(stream)
            blocked = table[row].to(device)
            ok &= bool(torch.isneginf(logits[0, 0][blocked]).all())
            ok &= bool(torch.equal(logits[0, 0][~blocked], before[0, 0][~blocked]))
        out[name] = ok
    return out


# -- snac ---------------------------------------------------------------------------------

def snac(device: torch.device) -> dict:
    from orpheus_svc.audio.codec import load_snac, write_random_snac

    with tempfile.TemporaryDirectory() as d:
        path = write_random_snac(Path(d) / "snac", seed=3)
        cpu = load_snac(path, device="cpu", noise=False)
        dev = load_snac(path, device=device, noise=False)
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 4096, size=(12, 7)) for _ in range(4)]
    ref, got = cpu.decode_frames(frames), dev.decode_frames(frames)
    out = {"decode_snr_db_vs_cpu": _snr_db(np.asarray(got), np.asarray(ref)), "ms": {}}
    for windows in (1, 16, 64):
        for n in (4, 12):
            batch = [rng.integers(0, 4096, size=(n, 7)) for _ in range(windows)]
            out["ms"][f"{windows}x{n}"] = _median_ms(lambda: dev.decode_frames(batch), device)
    return out


# -- decode -------------------------------------------------------------------------------

def _row(slot: int, k: int, position: int, sampling: SamplingParams) -> StepRow:
    fp = (position + k) % FRAME_TOKENS
    return StepRow(gen_id=slot, slot=slot, request=SimpleNamespace(sampling=sampling, adapter=-1),
                   seed=slot + 1, prefill=False, num_generated=k,
                   last_token=audio_token_id((fp + 6) % 7, (slot * 31 + k) % 4096),
                   position=position + k, frame_position=fp, stop_allowed=fp == 0)


def _random_model(tiny: bool, device: torch.device, dtype: torch.dtype, seed: int = 0):
    """(spec, weights): the Orpheus-3B shapes (demo width with `tiny`), HF init (N(0, 0.02),
    norms 1) drawn on `device`, which for 3.3 B values is much faster than the CPU
    (models/demo.py random_state_dict draws on the CPU, for bytes that do not depend on it)."""
    from orpheus_svc.models.demo import demo_spec
    from orpheus_svc.models.llama_config import orpheus_3b_spec

    spec = demo_spec() if tiny else orpheus_3b_spec()
    gen = torch.Generator(device=device).manual_seed(seed)
    weights = {n: (torch.ones(s, device=device, dtype=dtype) if n.endswith("norm.weight") else
                   (torch.randn(s, device=device, generator=gen) * 0.02).to(dtype))
               for n, s in spec.tensor_shapes().items()}
    return spec, weights


def _loaded_backend(device: torch.device, tiny: bool, slots: int, context: int,
                    room: int = 64):
    """TorchBackend over random weights, every slot holding `context` tokens of random
    audio (a mid-utterance KV cache)."""
    from orpheus_svc.engine.torch.backend import TorchBackend
    from orpheus_svc.engine.model.llama import SlotLlama

    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    spec, weights = _random_model(tiny, device, dtype)
    model = SlotLlama(spec, weights, num_slots=slots, max_seq_len=context + room, device=device,
                      dtype=dtype)
    del weights
    prompt = [AUDIO_BASE + (i * 7919) % 28672 for i in range(context)]
    for lo in range(0, slots, 16):
        n = min(16, slots - lo)
        model.prefill(list(range(lo, lo + n)), [prompt] * n)
    return TorchBackend(model)


def _stepper(backend, b: int, context: int, start: int = 0):
    """One decode step of slots 0..b-1 per call, each call one token further (from
    context + start): the key span grows by one every step, as in serving."""
    k = iter(range(start, 10**6))
    sampling = SamplingParams()

    def one_step():
        i = next(k)
        rows = [_row(s, i, context, sampling) for s in range(b)]
        backend.step(StepPlan(0, decode=rows))
    return one_step


def decode(device: torch.device, tiny: bool, batches: list[int], context: int) -> dict:
    slots = max(batches)
    backend = _loaded_backend(device, tiny, slots, context)
    model = backend.model
    out: dict = {"spec": "demo" if tiny else "orpheus-3b", "dtype": str(model.dtype),
                 "context": context, "kv_cache_gib": round(model.kv_cache_bytes / 2**30, 2),
                 "realtime_step_ms": round(REALTIME_STEP_MS, 2), "step_ms": {}, "prefill_ms": {}}
    for b in batches:
        out["step_ms"][b] = _median_ms(_stepper(backend, b, context), device)
    out["realtime_rows"] = max((b for b, ms in out["step_ms"].items() if ms <= REALTIME_STEP_MS),
                               default=0)
    voice_prompt = [128259, 128000, *range(1000, 1030), 128009, 128260, 128261, 128257]
    for p in (1, 8, 32):
        if p <= slots:
            out["prefill_ms"][p] = _median_ms(
                lambda p=p: model.prefill(list(range(p)), [voice_prompt] * p), device,
                warmup=2, repeat=7)
    if device.type == "cuda":
        out["peak_gpu_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
    return out


# SlotLlama's attention, the shipped way and the alternatives: (kernels, grouped decode).
# kernels None is torch's own choice (cuDNN's attention on the H200 before this was set).
VARIANTS = {"torch_choice_enable_gqa": (None, False), "torch_choice_grouped": (None, True),
            "math_grouped": ("math", True), "shipped": ("shipped", True)}


def attention(device: torch.device, tiny: bool, batches: list[int], context: int) -> dict:
    """Decode step and prefill per attention variant (VARIANTS). Every variant gets key
    spans and prompt lengths no earlier one used, so no variant is timed on shapes that an
    earlier one already planned (cuDNN keeps a plan per shape)."""
    from torch.nn.attention import SDPBackend
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    per = 40  # positions each variant uses per batch size (3 + 15 steps, then room)
    room = per * len(VARIANTS) * (len(batches) + 1) + 64
    backend = _loaded_backend(device, tiny, max(batches), context, room=room)
    model = backend.model
    shipped = model.sdpa_kernels
    out: dict = {}
    start, length = 0, 30
    for name, (kernels, grouped) in VARIANTS.items():
        model.sdpa_kernels = {None: None, "math": [SDPBackend.MATH], "shipped": shipped}[kernels]
        model.grouped_decode = grouped
        r: dict = {"step_ms": {}, "prefill_ms": {}}
        for b in batches:
            r["step_ms"][b] = _median_ms(_stepper(backend, b, context, start), device)
            start += per
        for p in sorted({1, min(8, max(batches))}):
            lengths = iter(range(length, length + 100))
            r["prefill_ms"][p] = _median_ms(
                lambda p=p, lengths=lengths: model.prefill(
                    list(range(p)), [[128259, *range(1000, 1000 + next(lengths))]] * p),
                device, warmup=2, repeat=7)
            length += 10
        step = _stepper(backend, 1, context, start)
        start += per
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA]
                                               if device.type == "cuda" else [])
        with torch_profile(activities=activities) as prof:
            step()
            _sync(device)
        r["attention_ops"] = sorted({e.key for e in prof.key_averages()
                                     if "attention" in e.key or "sdpa" in e.key.lower()})
        out[name] = r
    model.sdpa_kernels, model.grouped_decode = shipped, True
    return out


def profile(device: torch.device, tiny: bool, batches: list[int], context: int) -> dict:
    """Where a decode step's time goes: the forward alone, sampling alone, and torch's
    profiler over a few whole steps (top operators by host time and by device time)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    slots = max(batches)
    backend = _loaded_backend(device, tiny, slots, context)
    model = backend.model
    out: dict = {}
    for b in batches:
        slots_b, toks = list(range(b)), [audio_token_id(3, s) for s in range(b)]
        hidden = model.decode(slots_b, toks, [context] * b)
        rows = [_row(s, 0, context, SamplingParams()) for s in range(b)]
        r = {"forward_ms": _median_ms(lambda: model.decode(slots_b, toks, [context] * b), device),
             "sample_ms": _median_ms(lambda: backend.sample(rows, hidden), device)}
        step = _stepper(backend, b, context)
        for _ in range(3):
            step()
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA]
                                               if device.type == "cuda" else [])
        with torch_profile(activities=activities) as prof:
            for _ in range(5):
                step()
            _sync(device)
        events = prof.key_averages()
        def top(key):
            ranked = sorted(events, key=lambda e: getattr(e, key, 0) or 0, reverse=True)[:12]
            return [[e.key, e.count // 5, round((getattr(e, key, 0) or 0) / 5000, 3)]
                    for e in ranked]
        r["top_host_ms_per_step"] = top("self_cpu_time_total")
        if device.type == "cuda":
            r["top_device_ms_per_step"] = top("self_device_time_total")
            r["device_ms_per_step"] = round(sum(e.self_device_time_total for e in events)
                                            / 5000, 3)
        r["host_ms_per_step"] = round(sum(e.self_cpu_time_total for e in events) / 5000, 3)
        out[b] = r
    return out


def write_checkpoint(out: str, device: torch.device, tiny: bool, seed: int = 0) -> None:
    """A random checkpoint of the Orpheus-3B shapes (demo width with `tiny`) in the HF
    layout, in 2 GB shards as the real one is split."""
    from orpheus_svc.models.loader import write_checkpoint as write
    from orpheus_svc.models.tokenizer import build_byte_level_tokenizer_json

    spec, weights = _random_model(tiny, device, torch.bfloat16, seed)
    weights = {n: w.cpu() for n, w in weights.items()}
    write(out, spec, weights, build_byte_level_tokenizer_json(), max_shard_bytes=2 * 10**9)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="demo width for the decode timing and the checkpoint")
    ap.add_argument("--batches", default="1,8,16,32,64,128")
    ap.add_argument("--context", type=int, default=400, help="KV tokens per slot when timed")
    ap.add_argument("--sections", default="parity,grammar,snac,attention,decode")
    ap.add_argument("--output")
    ap.add_argument("--write-checkpoint", metavar="DIR",
                    help="only write a random Orpheus-3B-shaped checkpoint to DIR")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    if args.write_checkpoint:
        write_checkpoint(args.write_checkpoint, device, args.tiny)
        return 0
    doc: dict = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                 "torch": torch.__version__}
    for name in args.sections.split(","):
        t = time.perf_counter()
        try:
            if name in ("decode", "profile", "attention"):
                fn = {"decode": decode, "profile": profile, "attention": attention}[name]
                doc[name] = fn(device, args.tiny, [int(b) for b in args.batches.split(",")],
                               args.context)
            else:
                doc[name] = {"parity": parity, "grammar": grammar, "snac": snac}[name](device)
        except Exception as exc:  # report and go on: one broken path must not hide the rest
            doc[name] = {"error": f"{type(exc).__name__}: {exc}"}
            import traceback
            traceback.print_exc()
        doc[name]["section_s"] = round(time.perf_counter() - t, 1)
        print(json.dumps({name: doc[name]}), file=sys.stderr, flush=True)
    text = json.dumps(doc, indent=2, default=str)
    print(text)
    if args.output:
        Path(args.output).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
