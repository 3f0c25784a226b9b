"""SNAC codec: load a checkpoint for decoding, write a seeded random one, decode frames to PCM
(the encoder, which only a reference voice's registration needs: audio/snac_encoder.py).

Only the decoding half of SNAC is kept: the quantizer's codebooks and output projections
(codes -> latent) and the decoder (latent -> 24 kHz PCM). Weight norm is folded into plain
weights at load time; left in place every weight is recomputed on every forward, a fixed
~25 ms per call on the 2-core dev box (1-frame window: 52 -> 27 ms; 8 frames: 191 -> 165).

NoiseBlock: SNAC's decoder adds `randn * linear(x)` after every upsampling stage, in eval mode
too, so the stock model never decodes the same codes to the same PCM twice. We replace each
NoiseBlock with `_Noise`, which draws from a generator owned by the codec (never torch's
global RNG, which the engine thread may use) and can be switched off per call:

* noise on  (default for serving): the decoder as it was trained and as the reference Orpheus
  server runs it. The noise is white per latent step, so decoding in chunks and stitching the
  kept samples has the same statistics as one decode: chunking adds no seam of its own.
* noise off: deterministic output, and one `linear` conv less per stage. Used for offline
  reference decodes, for measuring the streaming error (docs/snac-streaming.md) and in tests.
* seeded rows (`decode_latents(..., noise_seeds=...)`): noise on, but a row with a seed
  draws its noise from generators seeded by it alone (one per NoiseBlock), so the same
  window with the same seed decodes to the same PCM whatever shares its call: the flusher
  gives each window of a seeded session such a seed, so a seed reproduces audio.
"""

from __future__ import annotations

import json
import logging
import os
import warnings
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import nn

from orpheus_svc.audio.gpu_streams import codec_stream
from orpheus_svc.audio.settings import CPU_BATCH_FRAMES, GPU_CALL_FRAMES
from orpheus_svc.audio.snac_graphs import BucketRunner
from orpheus_svc.audio.snac_kernels import fused_snake, fused_snake_works
from orpheus_svc.core.tokens import FRAME_TOKENS, SAMPLES_PER_FRAME, frames_to_codebooks
from orpheus_svc.files import read_mapping
from orpheus_svc.hub import CheckpointNotFoundError, resolve_checkpoint

log = logging.getLogger(__name__)

SNAC_FILES = ("config.json", "pytorch_model.bin")

#: hubertsiuzdak/snac_24khz, the codec Orpheus was trained on (docs/architecture.md).
SNAC_24KHZ_CONFIG: dict = {
    "sampling_rate": 24000,
    "encoder_dim": 48,
    "encoder_rates": [2, 4, 8, 8],
    "decoder_dim": 1024,
    "decoder_rates": [8, 8, 4, 2],
    "attn_window_size": None,
    "codebook_size": 4096,
    "codebook_dim": 8,
    "vq_strides": [4, 2, 1],
    "noise": True,
    "depthwise": True,
}


# Layers after the first DecoderBlock reach ~1 latent step either way (convT 1/8 step, RUs
# 39 samples at 64/256/512 per step: 0.61 + 0.15 + 0.08 step); 2 steps leave room, and
# tests check the cropped decode against the full one.
_CROP_MARGIN_STEPS = 2


class SnacLoadError(ValueError):
    """A SNAC checkpoint exists but cannot be used (bad config, corrupt or mismatched weights)."""


class _Noise(nn.Module):
    """SNAC's NoiseBlock with a private generator and an off switch (see module docstring).

    `supplied`: noise drawn before the call (snac_graphs.py: a CUDA graph reads it from a
    static buffer, filled by `fill` before each replay); `keep_last`: keep the noise this
    forward drew in `last` (the runner adopts it as its static buffer).
    """

    def __init__(self, linear: nn.Module, index: int = 0):
        super().__init__()
        self.linear = linear
        self.index = index  # which NoiseBlock: a seeded row draws other noise in each
        self.enabled = True
        self.generator: torch.Generator | None = None
        self.row_seeds: Sequence[int | None] | None = None  # set for one call only
        self.supplied: torch.Tensor | None = None
        self.keep_last = False
        self.last: torch.Tensor | None = None

    def fill(self, noise: torch.Tensor) -> torch.Tensor:
        """Draw one call's noise into `noise` [B, 1, T]: every row from the codec's generator,
        then each seeded row (row_seeds) again from its seed alone. Returns `noise`."""
        noise.normal_(generator=self.generator)  # what torch.randn(shape, generator) draws
        if self.row_seeds is not None:
            for row, seed in enumerate(self.row_seeds):
                if seed is not None:
                    g = torch.Generator(device=noise.device)
                    g.manual_seed((seed * 0x100000001B3 + self.index) % (1 << 63))
                    noise[row].normal_(generator=g)
        return noise

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.enabled:
            return x
        noise = self.supplied
        if noise is None:
            noise = self.fill(x.new_empty((x.shape[0], 1, x.shape[2])))
            if self.keep_last:
                self.last = noise
        return x + noise * self.linear(x)


class _Snake(nn.Module):
    """snac's Snake1d, x + sin(alpha x)^2 / alpha, same arithmetic (bitwise), cheaper.

    Why replace it: (1) snac's `snake` is torch.jit.script'ed and the profiling executor
    re-specialises on every new input length; the flusher's windows come in many lengths,
    and each new one cost ~20% extra. (2) The activations at the last decoder stages are
    large (64 channels x 512 samples per latent step: 10 MB for a 19-frame window), and
    out-of-place elementwise ops allocate a fresh buffer per op; in place they reuse one.
    Measured on CPU: 15-20% less decode time, more the longer the window.

    On CUDA, once the start-up check passed (SnacCodec), `fused` runs the same function as
    one Triton kernel instead (audio/snac_kernels.py: 1 launch, not 5).
    """

    def __init__(self, alpha: torch.Tensor):
        super().__init__()
        self.alpha = alpha
        self.register_buffer("inv_alpha", (alpha.detach().float() + 1e-9).reciprocal().to(alpha.dtype))
        self.fused = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused:
            return fused_snake(x, self.alpha, self.inv_alpha)
        y = torch.mul(x, self.alpha)
        return y.sin_().square_().mul_(self.inv_alpha).add_(x)


class _Residual(nn.Module):
    """snac's ResidualUnit with the skip added in place into the block's fresh output."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.block = block

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        pad = (x.shape[-1] - y.shape[-1]) // 2
        if pad > 0:
            x = x[..., pad:-pad]
        return y.add_(x)


def _fold_weight_norm(model: nn.Module) -> int:
    """Replace every parametrized weight by its current value; returns how many were folded."""
    from torch.nn.utils import parametrize

    folded = 0
    for module in list(model.modules()):
        if parametrize.is_parametrized(module):
            for name in list(module.parametrizations.keys()):
                parametrize.remove_parametrizations(module, name, leave_parametrized=True)
                folded += 1
    return folded


def _import_snac():
    # snac decorates `snake` with torch.jit.script at import, which newer torch deprecates
    # with a FutureWarning on every process start; it is not ours to act on.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning, message=".*torch.jit.script.*")
        import snac
        import snac.layers
    return snac


def _build_snac(config: dict) -> nn.Module:
    SNAC = _import_snac().SNAC

    try:
        return SNAC(**config)
    except TypeError as exc:
        raise SnacLoadError(f"SNAC config.json has an unknown or missing field: {exc}") from exc


class SnacCodec:
    """A SNAC decoder ready for inference: folded weights, eval mode, switchable noise.

    On CUDA (module docstring of snac_graphs.py for the whole picture): the decoder runs in
    `dtype` (bfloat16 by default: runtime.py), the quantizer in float32; the Snake layers
    are one Triton kernel each once `fused_snake_works` passed; calls run on the codec's own
    low-priority `stream` (audio/gpu_streams.py), as CUDA graphs per bucketed shape when
    `graphs` > 0 (how many it may hold); codes go up from pinned memory without blocking
    and PCM comes back into pinned memory, waited for on an event that sleeps (the GIL is
    released meanwhile). On a CPU none of this applies and decoding is plain eager torch.

    Not thread-safe: use one codec from one thread (the flusher's) at a time.
    """

    def __init__(self, model: nn.Module, config: dict, device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32, noise: bool = True, seed: int = 0,
                 max_batch_frames: int = 0, graphs: int = 0, fused_snake: bool = True):
        self.config = dict(config)
        self.device = torch.device(device)
        cuda = self.device.type == "cuda"
        # Frames per decode call the flusher aims for (max_decode_frames = 0): on a CPU the
        # cost per frame rises past ~24; on a GPU the cap keeps one call short enough not
        # to hold a new stream's first chunk back (settings.GPU_CALL_FRAMES).
        self.max_batch_frames = max_batch_frames or (GPU_CALL_FRAMES if cuda else CPU_BATCH_FRAMES)
        self.dtype = dtype
        self.sample_rate = int(config.get("sampling_rate", 24000))
        self.hop_length = int(np.prod(config["decoder_rates"]))
        strides = list(config["vq_strides"])
        # One frame holds 1 + 2 + 4 codes: the codebook strides must be 4, 2, 1 latent steps.
        if strides != [4, 2, 1]:
            raise SnacLoadError(f"vq_strides must be [4, 2, 1] for Orpheus frames, got {strides}")
        self.samples_per_frame = self.hop_length * strides[0]
        if self.samples_per_frame != SAMPLES_PER_FRAME:
            raise SnacLoadError(f"this SNAC makes {self.samples_per_frame} samples per frame; "
                                f"Orpheus frames are {SAMPLES_PER_FRAME}")
        self.quantizer = model.quantizer
        self.decoder = model.decoder
        self._noise_blocks = self._replace_noise_blocks(self.decoder)
        self._replace_hot_modules(self.decoder)
        blocks = [i for i, m in enumerate(self.decoder.model) if type(m).__name__ == "DecoderBlock"]
        self._crop_after = blocks[0] if blocks else -1
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(seed)
        for block in self._noise_blocks:
            block.generator = self.generator
        self.noise = noise
        self.stream = codec_stream(self.device) if cuda else None
        self._done = torch.cuda.Event(blocking=True) if cuda else None  # sleeps, no spin
        self.fused_snake = bool(cuda and fused_snake and fused_snake_works(self.device, dtype))
        self._set_fused_snake(self.fused_snake)
        self.graphs = BucketRunner(self, capture=True, max_graphs=graphs) if cuda and graphs else None
        if cuda:
            log.info("SNAC on %s in %s: fused Snake %s, CUDA graphs %s, %d frames per call",
                     self.device, str(dtype).removeprefix("torch."),
                     "on" if self.fused_snake else "off (torch Snake)",
                     f"up to {graphs}" if graphs else "off", self.max_batch_frames)

    def _set_fused_snake(self, on: bool) -> None:
        for module in self.decoder.modules():
            if isinstance(module, _Snake):
                module.fused = on

    @property
    def snake_layers(self) -> int:
        """How many Snake activations one decode runs (29 for snac_24khz)."""
        return sum(isinstance(m, _Snake) for m in self.decoder.modules())

    @staticmethod
    def _replace_noise_blocks(decoder: nn.Module) -> list[_Noise]:
        NoiseBlock = _import_snac().layers.NoiseBlock

        replaced = []
        for module in decoder.modules():
            for name, child in list(module.named_children()):
                if isinstance(child, NoiseBlock):
                    new = _Noise(child.linear, len(replaced))
                    setattr(module, name, new)
                    replaced.append(new)
        return replaced

    @staticmethod
    def _replace_hot_modules(decoder: nn.Module) -> None:
        layers = _import_snac().layers
        for module in list(decoder.modules()):
            for name, child in list(module.named_children()):
                if isinstance(child, layers.Snake1d):
                    setattr(module, name, _Snake(child.alpha))
                elif isinstance(child, layers.ResidualUnit):
                    setattr(module, name, _Residual(child.block))

    @property
    def has_noise(self) -> bool:
        """Whether this architecture has NoiseBlocks at all (config `noise`)."""
        return bool(self._noise_blocks)

    @property
    def noise(self) -> bool:
        return self._noise

    @noise.setter
    def noise(self, on: bool) -> None:
        self._noise = bool(on)
        for block in self._noise_blocks:
            block.enabled = self._noise

    def modules(self) -> list[nn.Module]:
        return [self.quantizer, self.decoder]

    def _check_codes(self, frames: np.ndarray) -> np.ndarray:
        frames = np.asarray(frames, dtype=np.int64)
        if frames.ndim != 2 or frames.shape[1] != FRAME_TOKENS:
            raise ValueError(f"frames must have shape [F, 7], got {frames.shape}")
        size = int(self.config["codebook_size"])
        if frames.size and (frames.min() < 0 or frames.max() >= size):
            raise ValueError(f"codes must be 0..{size - 1}")
        return frames

    @torch.inference_mode()
    def latents(self, batch: Sequence[np.ndarray]) -> torch.Tensor:
        """Codes -> decoder input: B windows of F frames -> [B, latent_dim, 4F] on the device.

        Pointwise in time (codebook lookup, 1x1 projection, repeat), so a crop of the
        result equals the latent of the cropped codes; the flusher crops at latent steps.
        """
        lengths = {int(np.shape(w)[0]) for w in batch}
        if len(lengths) != 1:
            raise ValueError(f"all windows of one decode must have the same frame count, got {sorted(lengths)}")
        stacked = np.stack([self._check_codes(w) for w in batch])  # [B, F, 7]
        b = stacked.shape[0]
        c0, c1, c2 = frames_to_codebooks(stacked.reshape(-1, FRAME_TOKENS))
        flat = torch.from_numpy(np.concatenate([c0, c1, c2]))  # [B*F | B*2F | B*4F]
        if self.device.type == "cuda":  # one copy from pinned memory, queued, not waited for
            flat = flat.pin_memory().to(self.device, non_blocking=True)
        n0, n1 = c0.size, c1.size
        codes = [flat[:n0].view(b, -1), flat[n0:n0 + n1].view(b, -1), flat[n0 + n1:].view(b, -1)]
        return self.quantizer.from_codes(codes).to(self.dtype)

    @torch.inference_mode()
    def decode_latents(self, z: torch.Tensor, keep: tuple[int, int] | None = None,
                       noise: bool | None = None,
                       noise_seeds: Sequence[int | None] | None = None) -> np.ndarray:
        """[B, latent_dim, T] -> [B, T*512] float32 PCM, or only samples [lo, hi) if keep=(lo, hi).

        With `keep`, the context is dropped inside the decoder, where it stops mattering
        (see _crop); the kept samples are the same as those of the full decode.
        `noise` overrides the codec's setting for this call only. `noise_seeds` (one per
        row, None for none): a row with a seed draws its noise from that seed alone.
        """
        steps = z.shape[-1]
        lo, hi = (0, steps * self.hop_length) if keep is None else keep
        if not 0 <= lo <= hi <= steps * self.hop_length:
            raise ValueError(f"keep {keep} is outside the window's {steps * self.hop_length} samples")
        if hi == lo:
            return np.zeros((z.shape[0], 0), dtype=np.float32)
        previous = self.noise
        if noise is not None:
            self.noise = noise
        if noise_seeds is not None:
            if len(noise_seeds) != z.shape[0]:
                raise ValueError(f"{len(noise_seeds)} noise seeds for {z.shape[0]} rows")
            for block in self._noise_blocks:
                block.row_seeds = noise_seeds
        try:
            if self.stream is None:
                if self.graphs is None:
                    return self.forward(z, lo, hi, keep is not None).float().numpy()
                return self.graphs.run(z, lo, hi, keep is not None).float().numpy().copy()
            caller = torch.cuda.current_stream(self.device)
            with torch.cuda.stream(self.stream):
                if caller != self.stream:  # z was made on the caller's stream
                    self.stream.wait_stream(caller)
                if self.graphs is not None:
                    pcm = self.graphs.run(z, lo, hi, keep is not None)
                else:
                    pcm = self.forward(z, lo, hi, keep is not None)
                return self._to_host(pcm)
        finally:
            self.noise = previous
            for block in self._noise_blocks:
                block.row_seeds = None

    def forward(self, z: torch.Tensor, lo: int, hi: int, crop: bool) -> torch.Tensor:
        """The decoder on z [B, latent_dim, T]: samples [lo, hi) of each row, [B, hi - lo] in
        the decoder's dtype (a view into its last activation). `crop`: drop the context
        after the first upsampling block (_crop). Eager, or inside a graph capture."""
        x, base = z, 0
        for i, layer in enumerate(self.decoder.model):
            x = layer(x)
            if i == self._crop_after and crop:
                x, base = self._crop(x, z.shape[-1], lo, hi)
        return x[:, 0, lo - base:hi - base]

    def _to_host(self, pcm: torch.Tensor) -> np.ndarray:
        """[B, n] on the device -> float32 numpy, through pinned memory: the copy is queued on
        the codec's stream and the thread sleeps on an event until it is done (CUDA)."""
        pcm = pcm.float().contiguous()
        host = torch.empty(pcm.shape, dtype=torch.float32, pin_memory=True)
        host.copy_(pcm, non_blocking=True)
        self._done.record(self.stream)
        self._done.synchronize()
        return host.numpy()

    def _crop(self, x: torch.Tensor, steps: int, lo: int, hi: int) -> tuple[torch.Tensor, int]:
        """Cut the activation after the first upsampling block to the kept samples + margin.

        Most of the decoder's receptive field (+-10 latent steps) lies in the layers up to
        and including the first DecoderBlock (the convs at 1 and 8 samples per step); all
        later layers together reach about 1 step either way. They are also ~85% of the
        cost. So the window's left context and lookahead are paid only by the cheap early
        layers: from here on the tensor is the kept samples +- _CROP_MARGIN_STEPS.

            window      [ ctx |########## kept ##########| lookahead ]
            after blk1        [m|########## kept ##########|m]        m = margin
        """
        per_step = x.shape[-1] // steps
        first = max(0, lo // self.hop_length - _CROP_MARGIN_STEPS)
        last = min(steps, -(-hi // self.hop_length) + _CROP_MARGIN_STEPS)
        return x[..., first * per_step:last * per_step].contiguous(), first * self.hop_length

    def decode_frames(self, batch: Sequence[np.ndarray], noise: bool | None = None) -> np.ndarray:
        """Decode B windows of F frames each ([F, 7] codes, position order) to [B, F*2048] float32.

        All windows of one call must have the same F (the flusher groups them). A window is
        decoded as a whole: its first and last samples see zero padding, not their neighbours.
        `noise` overrides the codec's setting for this call only.
        """
        if len(batch) == 0:
            return np.zeros((0, 0), dtype=np.float32)
        return self.decode_latents(self.latents(batch), noise=noise)


def read_snac(ref: str | os.PathLike[str]) -> tuple[nn.Module, dict]:
    """A SNAC checkpoint (local dir or hub id, HF layout: config.json + pytorch_model.bin) as
    the whole snac.SNAC model (encoder, quantizer, decoder) on the CPU, weight norm folded,
    in eval mode without gradients, and its config. load_snac keeps the decoding half;
    audio/snac_encoder.py the encoding half."""
    directory = resolve_checkpoint(ref, list(SNAC_FILES), what="SNAC checkpoint")
    missing = [name for name in SNAC_FILES if not (directory / name).is_file()]
    if missing:
        raise CheckpointNotFoundError(
            f"SNAC checkpoint {str(ref)!r} ({directory}) lacks {', '.join(missing)}; "
            f"expected the HF layout of hubertsiuzdak/snac_24khz")
    config = read_mapping(directory / "config.json", SnacLoadError, what="SNAC config")
    model = _build_snac(config)
    try:
        state = torch.load(directory / "pytorch_model.bin", map_location="cpu", weights_only=True)
    except Exception as exc:  # pickle, zip and EOF errors all mean the same to the user
        raise SnacLoadError(f"cannot read SNAC weights {directory / 'pytorch_model.bin'}: "
                            f"{exc.__class__.__name__}: {exc}") from exc
    if not isinstance(state, dict):
        raise SnacLoadError(f"SNAC weights {directory / 'pytorch_model.bin'} are not a state dict")
    try:
        # Old checkpoints store weight_g/weight_v; torch's weight_norm load hook maps them.
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise SnacLoadError(f"SNAC weights do not match config.json: {exc}") from exc
    _fold_weight_norm(model)
    model.eval().requires_grad_(False)
    return model, config


def load_snac(ref: str | os.PathLike[str], device: str | torch.device = "cpu",
              dtype: torch.dtype = torch.float32, noise: bool | None = None,
              seed: int = 0, max_batch_frames: int = 0, graphs: int = 0,
              fused_snake: bool = True) -> SnacCodec:
    """Load a SNAC checkpoint (local dir or hub id, HF layout: config.json + pytorch_model.bin).

    Weight norm is folded, the encoder is dropped, the model is in eval mode on `device`,
    the decoder in `dtype` (the quantizer, a lookup and three 1x1 convs, stays float32).
    `noise=None` keeps the checkpoint's own setting (config `noise`, true for snac_24khz);
    `seed` seeds the codec's private noise generator. CUDA only: `max_batch_frames` (0:
    settings.GPU_CALL_FRAMES) sizes the graph buckets, `graphs` caps the CUDA graphs held
    (0: eager), `fused_snake` allows the Triton Snake (SnacCodec).
    """
    model, config = read_snac(ref)
    model.encoder = None  # decoding only: saves its memory (audio/snac_encoder.py encodes)
    model.to(device=device)
    model.decoder.to(dtype=dtype)
    use_noise = bool(config.get("noise", True)) if noise is None else noise
    return SnacCodec(model, config, device=device, dtype=dtype, noise=use_noise, seed=seed,
                     max_batch_frames=max_batch_frames, graphs=graphs, fused_snake=fused_snake)


def write_random_snac(out_dir: str | os.PathLike[str], seed: int,
                      config: dict | None = None) -> Path:
    """Write a seeded random-init SNAC (24 kHz architecture unless `config` says otherwise)
    as config.json + pytorch_model.bin, the layout of hubertsiuzdak/snac_24khz.

    Same seed, same bytes of weights. Torch's global RNG is left as it was. The result
    decodes to finite PCM (the decoder ends in tanh) but not to speech.
    """
    config = dict(SNAC_24KHZ_CONFIG if config is None else config)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = _build_snac(config)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    torch.save(model.state_dict(), out / "pytorch_model.bin")
    return out
