"""Streaming flusher settings (pure data, no torch): part of the service's Config tree."""

from __future__ import annotations

from dataclasses import dataclass

from orpheus_svc.core.checks import is_finite, is_int, require

#: Samples per SNAC latent step at 24 kHz (prod of decoder_rates); 4 steps = 1 frame.
HOP = 512
FRAME = 2048
#: Frames per SNAC call on a CPU: the cost per frame is flat to ~24 and rises beyond
#: (docs/snac-streaming.md). A codec without its own `max_batch_frames` gets this.
CPU_BATCH_FRAMES = 24
#: Frames per call of the simulator's GPU codec (engine/sim/codec.py), which models eager
#: float32 SNAC: one large call per iteration, a call's launch cost dominating small ones.
GPU_BATCH_FRAMES = 1024
#: Frames per SNAC call on CUDA (bfloat16, fused Snake, CUDA graphs: audio/snac_graphs.py),
#: the cap that keeps one call from holding a new stream's first chunk back. On paper:
#: SNAC is bound by activation traffic, not FLOPs (0.67 GFLOP per decoded frame). Eager
#: float32 with the torch Snake moves ~137 MB per decoded frame (a dispatch-mode count on
#: the cropped 24 kHz decoder), bfloat16 with the fused Snake ~29 MB. Taking today's
#: 67 ms eager call as ~1,024 frames (~65 us a frame), the traffic ratio gives ~14 us a
#: frame: 256 frames are ~3.5 ms, the longest a first chunk waits for a call in progress;
#: at 256 streams (~3,500 frames/s decoded, context included) ~14 calls a second, ~5% of
#: the GPU.
GPU_CALL_FRAMES = 256
CODEC_DTYPES = ("auto", "float32", "bfloat16")


@dataclass(frozen=True)
class FlusherSettings:
    """How the flusher cuts a generation's frames into SNAC decode windows.

    All sizes are in 24 kHz samples; contexts and chunk caps are whole latent steps
    (512 samples = 1/4 frame), the finest grain at which the decoder's input can be cut.

    The defaults were chosen from `bench/snac_stream.py --quick --sweep` (random-init
    24 kHz SNAC, 1 CPU thread, noise off; the table and the reasoning are in
    docs/snac-streaming.md):

    * error: SNR of the streamed PCM against one offline decode of the whole utterance.
      Away from the first chunk it is set by the context on each side of a window, about
      +5 dB per latent step (57.5 dB at 6 steps left / 5 ahead; exact from 10 steps, the
      decoder's receptive field). Over a whole 2-8 s utterance the first chunk dominates:
      29 dB on a 1024-sample head, 32 dB on a 512-sample one (49.7 vs 54.0 dB overall).
    * cost: CPU seconds per audio second. The window's context is paid only by the
      decoder's cheap early layers (codec._crop), so left context is nearly free;
      lookahead is paid in latency instead (it delays every chunk). Chunks ramp up from
      one frame so that audio flows early, then stay at 16 frames.

    first_chunk_samples: emitted from frame 0 alone, as soon as it exists (7 tokens); the
        head of frame 0 is the part that later frames change least. 0 turns the early
        chunk off (first audio then waits for the lookahead).
    left_context_samples: decoded before each chunk and thrown away.
    lookahead_samples: the newest audio is withheld this long until later frames arrive
        (the decoder looks ahead too). At the end of a generation nothing is withheld.
    min_chunk_samples / max_chunk_samples / chunk_growth: a chunk (other than the first
        and the last) is emitted once at least clamp(emitted * chunk_growth, min, max)
        new samples are ready: small chunks while the listener has little audio, long
        (cheap) ones once it has plenty. A growth g keeps a listener fed only if the
        generation runs at >= (1 + g) x real time early on; 1.0 assumes the scheduler's
        first-audio priority gives new generations that. Ready audio beyond max is split
        into windows of max, which then have equal lengths and batch together.
    low_water_samples: when the listener's buffer, as the flusher estimates it (audio
        sent minus wall time since the listener reached the generation, by the scheduler's
        playout clock: core/playout.py), is below this, a chunk goes as soon as anything is ready,
        without waiting for the chunk target. Chunking then never starves a slow
        generation; the sweep's playout table shows what it buys. Keep it above the
        decode time of one chunk.
    max_decode_frames: cap on windows x window frames in one SNAC call. 0 (the default):
        the codec's own `max_batch_frames`, CPU_BATCH_FRAMES on a CPU (the cost per frame
        rises past ~24 frames per call as activations leave the cache) and far more on a
        GPU, where one large call beats several small ones. A positive value overrides it.
    seeded_call_windows: the row count of a SNAC call that holds a seeded session's window
        (fewer when max_decode_frames allows fewer windows of its length): such a call
        always has exactly that many rows, filled with other windows or zero rows, so that
        the seeded window's bits never depend on its batch (audio/calls.py). Larger: fewer
        calls when many seeded sessions run; smaller: less padding when few do.
    max_iteration_s: once an iteration has decoded this long, it starts no further SNAC
        call: it emits what it has and the next iteration (at once) plans again. Windows
        are decoded most urgent first: first chunks, then listeners with the least audio
        buffered. So when the codec cannot keep up (the CPU demo under load), a new
        generation's first audio waits for at most about one SNAC call, not for the whole
        backlog. A GPU decodes each iteration's windows well within it, so it never binds.
    codec_dtype: the SNAC decoder's dtype: "auto" (bfloat16 on CUDA, float32 on a CPU),
        "float32" or "bfloat16". tests/audio/test_snac_precision.py bounds bfloat16's
        error against float32 on the same codes.
    codec_graphs: CUDA only: how many SNAC CUDA graphs (one per bucketed call shape,
        audio/snac_graphs.py) the codec may hold; 0 runs SNAC eagerly.
    null_codec: benchmarks only: SNAC is not loaded and every decode is silence of the
        right length at no cost (audio/nullcodec.py), batched as SNAC would be, so that a
        run beside one with SNAC gives SNAC's share of the device. Never serve
        it to a listener: the audio is silence.
    """

    first_chunk_samples: int = 512
    left_context_samples: int = 6 * HOP
    lookahead_samples: int = 5 * HOP
    min_chunk_samples: int = FRAME
    max_chunk_samples: int = 16 * FRAME
    chunk_growth: float = 1.0
    low_water_samples: int = 1024
    max_decode_frames: int = 0
    max_iteration_s: float = 0.1
    seeded_call_windows: int = 8
    codec_dtype: str = "auto"
    codec_graphs: int = 64
    null_codec: bool = False

    def __post_init__(self) -> None:
        for name in ("first_chunk_samples", "left_context_samples", "lookahead_samples",
                     "min_chunk_samples", "max_chunk_samples", "low_water_samples",
                     "max_decode_frames", "seeded_call_windows", "codec_graphs"):
            require(is_int(getattr(self, name)), self, name, "must be an int")
        require(0 <= self.first_chunk_samples <= FRAME, self, "first_chunk_samples",
                f"must be 0..{FRAME} (a part of frame 0)")
        for name in ("left_context_samples", "lookahead_samples"):
            value = getattr(self, name)
            require(value >= 0 and not value % HOP, self, name,
                    f"must be a non-negative multiple of {HOP} (one latent step)")
        require(self.min_chunk_samples >= 1, self, "min_chunk_samples", "must be >= 1")
        require(self.max_chunk_samples >= HOP and not self.max_chunk_samples % HOP, self,
                "max_chunk_samples", f"must be a positive multiple of {HOP}")
        require(self.max_chunk_samples >= self.min_chunk_samples, self, "max_chunk_samples",
                f"must be >= min_chunk_samples ({self.min_chunk_samples})")
        require(is_finite(self.chunk_growth) and self.chunk_growth >= 0, self, "chunk_growth",
                "must be a finite number >= 0")
        require(is_finite(self.max_iteration_s) and self.max_iteration_s > 0, self,
                "max_iteration_s", "must be a finite number > 0")
        require(self.low_water_samples >= 0, self, "low_water_samples", "must be >= 0")
        require(self.seeded_call_windows >= 1, self, "seeded_call_windows", "must be >= 1")
        require(self.codec_dtype in CODEC_DTYPES, self, "codec_dtype",
                f"must be one of {', '.join(CODEC_DTYPES)}")
        require(self.codec_graphs >= 0, self, "codec_graphs", "must be >= 0 (0: eager)")
        require(isinstance(self.null_codec, bool), self, "null_codec", "must be true or false")
        require(self.max_decode_frames >= 0, self, "max_decode_frames",
                "must be >= 0 (0: the codec's max_batch_frames)")
