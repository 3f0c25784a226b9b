"""SNAC's encoding half: 24 kHz PCM -> [F, 7] codes -> the audio token ids a reference
voice's prompt holds (core/reference.py). Needed only while registering a reference voice:
load it, encode the clips, drop it (`load_snac_encoder`; the serving codec, audio/codec.py
load_snac, never holds the encoder).

    pcm [n] --(right zero-pad to whole frames: SNAC's own `preprocess`)--> [F * 2048]
        --encoder--> latent [D, 4F] --residual VQ--> c0 [F], c1 [2F], c2 [4F]
        --core/tokens.py codebooks_to_frames--> [F, 7] --frames_to_token_ids--> 7F ids

    F = ceil(n / 2048): the tail is padded, not cut, so the clip's last words stay in; the
    pad is under 85 ms of silence, which is how SNAC's own `encode` (and Canopy's zero-shot
    notebook, which calls it) treats a clip.

The codes are exactly the decoder's inverse layout: tokens -> core/tokens.py
token_ids_to_frames -> the same [F, 7], and SnacCodec.decode_frames decodes them like any
generated frames (tests/audio/test_snac_encoder.py).

Precision: float32 on every device. The codes are a nearest-codebook argmax; lower
precision moves latents across decision boundaries. On CUDA, convolutions may run in TF32
(torch's cudnn default), so a few codes can differ from a CPU encode of the same clip;
each is still the nearest code to within TF32's rounding, and the clip is encoded once.
"""

from __future__ import annotations

import math
import os

import numpy as np
import torch

from orpheus_svc.audio.clip import ClipSource, load_clip
from orpheus_svc.audio.codec import SnacLoadError, read_snac
from orpheus_svc.core.reference import (
    ReferenceVoice,
    check_language,
    check_name,
    check_transcript,
)
from orpheus_svc.core.tokens import (
    SAMPLES_PER_FRAME,
    codebooks_to_frames,
    frames_to_token_ids,
)


class SnacEncoder:
    """A SNAC checkpoint's encoder and quantizer, float32, eval mode, on `device`.
    Not thread-safe; one registration at a time uses it."""

    def __init__(self, model: torch.nn.Module, config: dict,
                 device: torch.device | str = "cpu") -> None:
        strides = list(config.get("vq_strides", []))
        if strides != [4, 2, 1]:
            raise SnacLoadError(f"vq_strides must be [4, 2, 1] for Orpheus frames, got {strides}")
        hop = int(np.prod(config["encoder_rates"]))
        if hop * strides[0] != SAMPLES_PER_FRAME:
            raise SnacLoadError(f"this SNAC encodes {hop * strides[0]} samples per frame; "
                                f"Orpheus frames are {SAMPLES_PER_FRAME}")
        self.device = torch.device(device)
        self.config = dict(config)
        model.decoder = None  # encoding only
        self._model = model.to(device=self.device, dtype=torch.float32)

    @torch.inference_mode()
    def encode(self, pcm: np.ndarray) -> np.ndarray:
        """24 kHz mono PCM (float in [-1, 1]) -> [F, 7] codes in frame position order,
        F = ceil(len(pcm) / 2048) (module docstring). ValueError for empty input."""
        x = np.ascontiguousarray(np.asarray(pcm, dtype=np.float32).reshape(-1))
        if x.size == 0:
            raise ValueError("no samples to encode")
        frames = math.ceil(x.size / SAMPLES_PER_FRAME)
        audio = torch.from_numpy(x).view(1, 1, -1).to(self.device)
        audio = self._model.preprocess(audio)  # right zero-pad, as SNAC.encode does
        z = self._model.encoder(audio)
        _, codes = self._model.quantizer(z)
        c0, c1, c2 = (c[0].cpu().numpy() for c in codes)
        # preprocess pads to a multiple of the attention window too (none for snac_24khz):
        # keep the clip's own frames only
        return codebooks_to_frames(c0[:frames], c1[:2 * frames], c2[:4 * frames])

    def encode_tokens(self, pcm: np.ndarray) -> list[int]:
        """encode, as the audio token ids the model emits for those frames."""
        return frames_to_token_ids(self.encode(pcm))

    def close(self) -> None:
        """Drop the weights (and their device memory) now, not when the last reference goes."""
        self._model = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


def load_snac_encoder(ref: str | os.PathLike[str],
                      device: str | torch.device = "cpu") -> SnacEncoder:
    """The encoder and quantizer of SNAC checkpoint `ref` (audio/codec.py read_snac: the same
    files, checks and folded weights as the serving decoder's) on `device`, for encoding
    reference clips; `close()` it when done."""
    model, config = read_snac(ref)
    return SnacEncoder(model, config, device)


def make_reference_voice(encoder: SnacEncoder, name: str, clip: ClipSource, transcript: str,
                         language: str = "en") -> ReferenceVoice:
    """A reference voice from a clip (bytes or a path, already allowed: audio/clip.py
    resolve_clip_path) and its transcript: the cheap checks first (name, transcript,
    language), then the clip decoded and checked (audio/clip.py load_clip), then encoded.
    ReferenceVoiceError naming the field at fault; nothing is kept anywhere, so a refusal
    leaves nothing half-made. Whether the name is free is the voice catalog's question."""
    check_name(name)
    check_transcript(transcript)
    check_language(language)
    pcm = load_clip(clip)
    return ReferenceVoice(name, transcript, tuple(encoder.encode_tokens(pcm)), language)
