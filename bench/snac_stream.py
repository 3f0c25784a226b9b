"""Streaming SNAC decode: our flusher vs the reference Orpheus decoder, same weights, same run.

    python bench/snac_stream.py --quick [--output out.json]   # < 3 min on 2 CPU cores
    python bench/snac_stream.py                              # more utterances
    python bench/snac_stream.py --sweep                      # the grid behind FlusherSettings

Prints one JSON object on stdout. Weights: a seeded random-init SNAC of the real 24 kHz
architecture (no hub here), so "weights": "random-init"; see docs/snac-streaming.md for why
that matters. Token streams (seeded): "random" = iid uniform codes; "runs" = every frame
position holds its code for a geometric run of frames (mean 3), a crude stand-in for the
stationary stretches of speech.

Schemes, both on the same folded codec with NoiseBlock off:
  ours       the Flusher, fed one frame per iteration (it never falls behind: the most
             chunks, so the highest cost it can have per audio second); its clock is a
             simulated one, the generation running at --gen-speed x real time, which
             decides when a listener would run dry (FlusherSettings.low_water_samples);
             the listener hears each utterance from its first frame on (the playout clock
             the scheduler hands over, core/playout.py)
  reference  every 7 tokens once >= 28 exist, decode the last 4 frames, emit samples
             [2048:4096] (frame k-3 when k frames exist): frames 1..F-3 only
Error: SNR (dB) against one offline decode of the whole utterance, pooled over utterances
(energy-weighted); the reference is scored over the samples it emits, where they belong.
Cost: CPU seconds (time.process_time, --threads torch threads) per emitted audio second.
Playout: the jitter buffer a listener needs never to run dry after its first audio, with
generation at --gen-speed x real time and decoding taken as instant (worst utterance).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time

import numpy as np
import torch

from orpheus_svc.audio.codec import load_snac, write_random_snac
from orpheus_svc.audio.flusher import Flusher
from orpheus_svc.audio.settings import HOP, FlusherSettings
from orpheus_svc.core.playout import PlayoutSnapshot
from orpheus_svc.core.tokens import SAMPLE_RATE, SAMPLES_PER_FRAME as FRAME


def make_streams(kind: str, count: int, seed: int, lo: int, hi: int) -> list[np.ndarray]:
    rng = np.random.default_rng([seed, {"random": 0, "runs": 1}[kind]])
    out = []
    for _ in range(count):
        n = int(rng.integers(lo, hi + 1))
        codes = rng.integers(0, 4096, (n, 7))
        if kind == "runs":
            hold = rng.random((n, 7)) > 1 / 3  # keep the previous frame's code w.p. 2/3
            for f in range(1, n):
                codes[f, hold[f]] = codes[f - 1, hold[f]]
        out.append(codes)
    return out


class Energy:
    """Pooled SNR: sum of reference energy over sum of error energy."""

    def __init__(self):
        self.signal = 0.0
        self.error = 0.0

    def add(self, got: np.ndarray, want: np.ndarray) -> None:
        self.signal += float(np.sum(want.astype(np.float64) ** 2))
        self.error += float(np.sum((got.astype(np.float64) - want) ** 2))

    def db(self) -> float:
        if self.error == 0:
            return float("inf")
        return round(10 * np.log10(self.signal / self.error), 2)


def jitter_needed_ms(emissions: list[tuple[float, int]]) -> float:
    """Buffer a listener needs so that playback started at the first audio never stalls.

    emissions: (time s, end sample) of each chunk. Chunk i must arrive before playback
    reaches the end of chunk i-1: t_i <= t_0 + buffer + end_(i-1).
    """
    t0 = emissions[0][0]
    need = max((t - t0 - prev_end / SAMPLE_RATE
                for (t, _), (_, prev_end) in zip(emissions[1:], emissions)), default=0.0)
    return round(max(0.0, need) * 1e3, 1)


def heard_from(first: bool, now: list[float]) -> PlayoutSnapshot | None:
    """The playout clock the engine's scheduler would hand over with a generation's first
    frame: a listener with nothing else to play hears it from when that frame exists."""
    return PlayoutSnapshot(now[0]) if first else None


def run_stream(codec, settings, frames, offline, t: "Tally", reference: bool, speed: float) -> None:
    """One utterance through ours and (optionally) the reference in lockstep.

    Frame k arrives; ours runs one flusher iteration, then the reference makes its decode
    for that frame, each timed on its own. Interleaving at this grain (~0.1 s) means a
    burst of load from elsewhere on the machine lands on both alike.
    """
    events = []
    now = [0.0]
    flusher = Flusher(codec, settings, events.extend, clock=lambda: now[0])
    ours_times, ref_times = [], []
    for k in range(1, len(frames) + 1):
        now[0] = k * FRAME / SAMPLE_RATE / speed  # frame k exists at this (simulated) time
        had = len(events)
        t0 = time.process_time()
        flusher.push(0, frames[k - 1:k], final=k == len(frames), playout=heard_from(k == 1, now))
        flusher.run_once()
        t.cpu_o += time.process_time() - t0
        if len(events) > had:
            ours_times.append((now[0], events[-1].sample_offset + events[-1].num_samples))
            if had == 0:
                t.first_tokens_o = max(t.first_tokens_o, 7 * k)
        if reference and k >= 4:  # 7k tokens exist: decode frames k-4..k-1, keep the 2nd
            t0 = time.process_time()
            audio = codec.decode_frames([frames[k - 4:k]])[0, FRAME:2 * FRAME]
            t.cpu_r += time.process_time() - t0
            t.ref.add(audio, offline[(k - 3) * FRAME:(k - 2) * FRAME])
            t.n_r += len(audio)
            ref_times.append((now[0], (k - 2) * FRAME))
            if k == 4:
                t.first_tokens_r = max(t.first_tokens_r, 7 * k)
            # The same windows through our decoder crop: how much of the speedup is ours
            # for the windowing, how much for dropping context inside the decoder.
            t0 = time.process_time()
            z = codec.latents([frames[k - 4:k]])
            cropped = codec.decode_latents(z, keep=(FRAME, 2 * FRAME))[0]
            t.cpu_rc += time.process_time() - t0
            t.ref_crop.add(cropped, audio)
    pcm = np.concatenate([e.pcm for e in events])
    assert len(pcm) == len(frames) * FRAME, "flusher lost or added samples"
    head = events[0].num_samples
    t.ours.add(pcm, offline)
    t.first.add(events[0].pcm, offline[:head])
    t.rest.add(pcm[head:], offline[head:])
    t.n_o += len(pcm)
    t.calls += flusher.num_decode_calls
    t.decoded += flusher.num_decoded_samples
    t.utterances += 1
    t.jitter_o = max(t.jitter_o, jitter_needed_ms(ours_times))
    if ref_times:
        # the reference's playback starts at frame 1 (it never emits frame 0)
        t.jitter_r = max(t.jitter_r, jitter_needed_ms([(a, b - FRAME) for a, b in ref_times]))


def run_batched(codec, settings, streams, speed: float) -> dict:
    """All streams at once through one flusher vs one flusher each, in lockstep per frame."""
    now = [0.0]
    shared_events, alone_events = [], []
    shared = Flusher(codec, settings, shared_events.extend, clock=lambda: now[0])
    alone = [Flusher(codec, settings, alone_events.extend, clock=lambda: now[0]) for _ in streams]
    cpu_shared = cpu_alone = 0.0
    for f in range(max(len(s) for s in streams)):
        now[0] = (f + 1) * FRAME / SAMPLE_RATE / speed
        live = [(g, s) for g, s in enumerate(streams) if f < len(s)]
        t0 = time.process_time()
        for g, s in live:
            shared.push(g, s[f:f + 1], final=f == len(s) - 1, playout=heard_from(f == 0, now))
        shared.run_once()
        t1 = time.process_time()
        for g, s in live:
            alone[g].push(g, s[f:f + 1], final=f == len(s) - 1, playout=heard_from(f == 0, now))
            alone[g].run_once()
        t2 = time.process_time()
        cpu_shared, cpu_alone = cpu_shared + t1 - t0, cpu_alone + t2 - t1
    audio_s = sum(e.num_samples for e in shared_events) / SAMPLE_RATE
    return {
        "concurrency": len(streams),
        "ours_batched_audio_s_per_cpu_s": round(audio_s / cpu_shared, 3),
        "ours_one_at_a_time_audio_s_per_cpu_s": round(audio_s / cpu_alone, 3),
        "decode_calls_batched": shared.num_decode_calls,
        "decode_calls_one_at_a_time": sum(fl.num_decode_calls for fl in alone),
    }


class Tally:
    """Error and cost accumulators of one set of utterances (merge to pool them)."""

    def __init__(self):
        self.ours, self.ref, self.first, self.rest = Energy(), Energy(), Energy(), Energy()
        self.ref_crop = Energy()  # reference windows decoded with our crop vs without
        self.cpu_o = self.cpu_r = self.cpu_rc = 0.0
        self.n_o = self.n_r = self.calls = self.decoded = self.utterances = 0
        self.first_tokens_o = self.first_tokens_r = 0  # worst utterance
        self.jitter_o = self.jitter_r = 0.0  # worst utterance, ms

    def merge(self, other: "Tally") -> "Tally":
        out = Tally()
        for name in ("ours", "ref", "first", "rest", "ref_crop"):
            e = getattr(out, name)
            for t in (self, other):
                e.signal += getattr(t, name).signal
                e.error += getattr(t, name).error
        for name in ("cpu_o", "cpu_r", "cpu_rc", "n_o", "n_r", "calls", "decoded", "utterances"):
            setattr(out, name, getattr(self, name) + getattr(other, name))
        for name in ("first_tokens_o", "first_tokens_r", "jitter_o", "jitter_r"):
            setattr(out, name, max(getattr(self, name), getattr(other, name)))
        return out

    def result(self) -> dict:
        r = {
            "ours_snr_db": self.ours.db(),
            "first_chunk_snr_db": self.first.db(),
            "ours_snr_db_after_first_chunk": self.rest.db(),
            "ours_audio_s_per_cpu_s": round(self.n_o / SAMPLE_RATE / self.cpu_o, 3),
            "ours_decode_calls_per_utterance": round(self.calls / self.utterances, 2),
            # deterministic cost proxy: window samples (context included) at the decoder
            # input per sample emitted; after the first upsampling block only the kept
            # samples +- 2 latent steps go on (codec._crop)
            "ours_decoded_per_emitted": round(self.decoded / self.n_o, 3),
            "first_audio_after_tokens": self.first_tokens_o,
            "ours_jitter_buffer_needed_ms": self.jitter_o,
        }
        if self.cpu_r:
            r["reference_snr_db"] = self.ref.db()
            r["reference_audio_s_per_cpu_s"] = round(self.n_r / SAMPLE_RATE / self.cpu_r, 3)
            r["reference_decoded_per_emitted"] = 4.0
            r["reference_first_audio_after_tokens"] = self.first_tokens_r
            r["reference_jitter_buffer_needed_ms"] = self.jitter_r
            r["reference_windows_with_our_crop_audio_s_per_cpu_s"] = round(
                self.n_r / SAMPLE_RATE / self.cpu_rc, 3)
            r["reference_windows_with_our_crop_snr_vs_uncropped_db"] = self.ref_crop.db()
        return r


_OFFLINE: dict[bytes, np.ndarray] = {}


def offline_decode(codec, frames: np.ndarray) -> np.ndarray:
    """One decode of the whole utterance, noise off: the ground truth (cached per stream)."""
    key = frames.tobytes()
    if key not in _OFFLINE:
        _OFFLINE[key] = codec.decode_frames([frames], noise=False)[0]
    return _OFFLINE[key]


def compare(codec, settings, streams, speed: float, reference=True) -> Tally:
    t = Tally()
    for frames in streams:
        run_stream(codec, settings, frames, offline_decode(codec, frames), t, reference, speed)
    return t


def decode_cost_table(codec, reps=2):
    """CPU ms per decoded frame for B windows of F frames: fixed cost per call vs batch size."""
    rng = np.random.default_rng(0)
    rows = []
    for frames, batch in ((1, 1), (4, 1), (8, 1), (16, 1), (24, 1), (32, 1), (4, 4), (8, 2), (8, 4), (16, 2)):
        windows = [rng.integers(0, 4096, (frames, 7)) for _ in range(batch)]
        codec.decode_frames(windows)
        best = float("inf")
        for _ in range(reps):
            t0 = time.process_time()
            codec.decode_frames(windows)
            best = min(best, time.process_time() - t0)
        rows.append({"windows": batch, "frames": frames, "cpu_ms": round(best * 1e3, 1),
                     "cpu_ms_per_frame": round(best * 1e3 / (batch * frames), 1)})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


def playout_table(base: FlusherSettings) -> list[dict]:
    """Pure window arithmetic: jitter buffer needed and decode calls for a 10 s utterance
    (117 frames) at several generation speeds, with and without the low-water rule."""
    from orpheus_svc.audio.windows import plan_windows

    rows = []
    for label, settings, rule in (("growth 1, no low-water rule", base, False),
                                  ("growth 0.5, no low-water rule",
                                   dataclasses.replace(base, chunk_growth=0.5), False),
                                  ("defaults (growth 1 + low-water rule)", base, True)):
        row = {"policy": label}
        for speed in (1.25, 1.5, 2.0, 3.0):
            emitted, first_at, times, calls = 0, None, [], 0
            n_frames = 117
            for k in range(1, n_frames + 1):
                now = k * FRAME / SAMPLE_RATE / speed
                hungry = rule and first_at is not None and \
                    emitted - (now - first_at) * SAMPLE_RATE < settings.low_water_samples
                for w in plan_windows(k, k == n_frames, emitted, settings, hungry=hungry):
                    first_at = now if first_at is None else first_at
                    emitted = w.end
                    calls += 1
                    times.append((now, w.end))
            row[f"x{speed}"] = {"jitter_ms": jitter_needed_ms(times), "calls": calls}
        rows.append(row)
    return rows


def sweep(codec, streams, base: FlusherSettings, speed: float):
    """Error and cost over a grid of one- or two-field changes to `base` (no reference runs).

    CPU times here are single passes on a shared machine: read them as rough; the
    decoded-per-emitted ratio and the call count are the exact cost drivers.
    """
    grid = [dict(left_context_samples=ctx * HOP, lookahead_samples=look * HOP)
            for ctx in (2, 3, 4, 5, 6, 8) for look in (3, 4, 5, 6, 8)]
    grid += [dict(first_chunk_samples=first) for first in (512, 1024, 1536, 2048)]
    grid += [dict(min_chunk_samples=lo * FRAME, max_chunk_samples=hi * FRAME, chunk_growth=g)
             for lo, hi, g in ((1, 16, 1.0), (2, 16, 1.0), (4, 16, 1.0), (2, 8, 1.0), (2, 24, 1.0),
                               (2, 16, 0.5), (2, 16, 2.0))]
    rows = []
    for change in grid:
        r = compare(codec, dataclasses.replace(base, **change), streams, speed, reference=False).result()
        rows.append({**change, **r})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return {"grid": rows, "decode_cost": decode_cost_table(codec), "playout": playout_table(base)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer utterances (< 3 min on 2 cores)")
    ap.add_argument("--sweep", action="store_true", help="settings grid (slow); table in the JSON")
    ap.add_argument("--output", help="also write the JSON here")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: steadier timing)")
    ap.add_argument("--concurrency", type=int, default=4, help="utterances in the batched run")
    ap.add_argument("--gen-speed", type=float, default=2.0,
                    help="simulated generation speed, x real time (drives the playout estimate)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)  # a benchmark process: ours to set

    per_kind = 3 if args.quick else 8
    lengths = (24, 96)  # frames: 2 to 8 s, one sentence-sized segment each
    streams = {k: make_streams(k, per_kind, args.seed, *lengths) for k in ("random", "runs")}
    settings = FlusherSettings()
    with tempfile.TemporaryDirectory() as tmp:
        codec = load_snac(write_random_snac(os.path.join(tmp, "snac"), seed=args.seed), noise=False)
    codec.decode_frames([streams["random"][0][:8]])  # warm-up (allocator, jit)

    out: dict = {
        "weights": "random-init",
        "snac_config": "24 kHz (hubertsiuzdak/snac_24khz architecture)",
        "noise": "off (NoiseBlock disabled) for ours, reference and the offline decode",
        "token_streams": {k: f"{per_kind} utterances, seeded" for k in streams},
        "utterance_frames": [int(len(s)) for k in streams for s in streams[k]],
        "torch_threads": args.threads,
        "cpu_time": ("time.process_time per emitted audio second, ours and reference timed in "
                     "lockstep per frame; ours fed 1 frame per iteration"),
        "gen_speed_x_real_time": args.gen_speed,
        "settings": dataclasses.asdict(settings),
    }
    if args.sweep:
        out["sweep"] = sweep(codec, streams["random"] + streams["runs"], settings, args.gen_speed)
    t0 = time.perf_counter()
    tallies = {k: compare(codec, settings, v, args.gen_speed) for k, v in streams.items()}
    everything = tallies["random"].merge(tallies["runs"]).result()
    out.update(everything)
    out["speedup"] = round(everything["ours_audio_s_per_cpu_s"]
                           / everything["reference_audio_s_per_cpu_s"], 2)
    out["speedup_is"] = "ours vs reference audio s per CPU s, one utterance at a time (like with like)"
    out["by_stream"] = {k: t.result() for k, t in tallies.items()}
    out["reference_samples_missing_per_utterance"] = "frame 0 and the last two frames (3 x 2048)"

    out["batched"] = run_batched(codec, settings, streams["random"][: args.concurrency],
                                 args.gen_speed)
    out["batched"]["note"] = ("the same utterances, one flusher for all vs one each, timed in "
                              "lockstep; CPU gains little from batching (docs/snac-streaming.md)")
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    text = json.dumps(out)
    print(text)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
