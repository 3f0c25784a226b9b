"""Seeded demo checkpoint: a tiny random Llama of the Orpheus vocabulary + a random SNAC.

Used when no model is configured: the whole pipeline (prompt, constrained decoding,
SNAC, streaming) runs on a CPU without downloads. The audio is noise, not speech.

    <cache>/demo-v1/
        model/          HF layout (config.json, model.safetensors, tokenizer.json, ...)
        snac/           written by orpheus_svc.audio.codec.write_random_snac
        manifest.json   sha256 of every file + one content hash; written last

The directory is built in a temporary sibling and renamed into place, so a reader
sees either nothing or a complete checkpoint, and two processes racing to build it
both end up using one complete copy. An existing copy is reused only when every file
matches the manifest; otherwise it is rebuilt. Change DEMO_VERSION whenever the
contents would change, so old caches are not mistaken for new ones.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import torch

from orpheus_svc.core.tokens import BOS_ID, END_OF_SPEECH_ID, ORPHEUS_VOCAB_SIZE
from orpheus_svc.models.llama_config import LlamaSpec, orpheus_3b_spec
from orpheus_svc.models.loader import write_checkpoint
from orpheus_svc.models.tokenizer import build_byte_level_tokenizer_json

log = logging.getLogger(__name__)

DEMO_VERSION = "demo-v1"
DEMO_SEED = 1234
MANIFEST = "manifest.json"
CACHE_ENV = "ORPHEUS_SVC_CACHE"


@dataclass(frozen=True)
class DemoPaths:
    """Where the demo checkpoint lives; content_hash identifies its exact bytes."""

    model_dir: Path
    snac_dir: Path
    content_hash: str


def demo_spec() -> LlamaSpec:
    """Tiny width, real vocabulary and RoPE of Orpheus-3B (so every id and code path exists)."""
    real = orpheus_3b_spec()
    return LlamaSpec(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, vocab_size=ORPHEUS_VOCAB_SIZE,
        rms_norm_eps=real.rms_norm_eps, rope_theta=real.rope_theta, rope_scaling=real.rope_scaling,
        max_position_embeddings=real.max_position_embeddings, tie_word_embeddings=True,
        torch_dtype="float16", bos_token_id=BOS_ID, eos_token_ids=(END_OF_SPEECH_ID,),
    )


def random_state_dict(spec: LlamaSpec, seed: int, dtype: torch.dtype = torch.float16
                      ) -> dict[str, torch.Tensor]:
    """HF-style init: weights ~ N(0, 0.02), norms = 1; deterministic for (spec, seed).

    Drawn in float32 from one CPU generator in tensor-name order, then cast, so the
    values do not depend on the storage dtype's random kernels.
    """
    gen = torch.Generator(device="cpu").manual_seed(seed)
    out: dict[str, torch.Tensor] = {}
    for name, shape in spec.tensor_shapes().items():
        if name.endswith("norm.weight"):
            out[name] = torch.ones(shape, dtype=dtype)
        else:
            out[name] = (torch.randn(shape, generator=gen, dtype=torch.float32) * 0.02).to(dtype)
    return out


def default_cache_dir() -> Path:
    """$ORPHEUS_SVC_CACHE, else ~/.cache/orpheus-svc (the demo lives in <cache>/demo-v1)."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "orpheus-svc"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _content_hash(files: dict[str, str]) -> str:
    h = hashlib.sha256()
    for rel, digest in sorted(files.items()):
        h.update(f"{rel}\0{digest}\n".encode())
    return h.hexdigest()


def _read_complete(root: Path) -> DemoPaths | None:
    """DemoPaths if `root` holds a complete, unmodified demo checkpoint, else None."""
    try:
        manifest = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
        if manifest.get("version") != DEMO_VERSION:
            return None
        files: dict[str, str] = manifest["files"]
        for rel, digest in files.items():
            if _sha256(root / rel) != digest:
                return None
        if _content_hash(files) != manifest["content_hash"]:
            return None
        return DemoPaths(root / manifest["model_dir"], root / manifest["snac_dir"],
                         manifest["content_hash"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _build(tmp: Path, seed: int) -> None:
    from orpheus_svc.audio.codec import write_random_snac  # lazy: pulls in the SNAC stack

    spec = demo_spec()
    write_checkpoint(tmp / "model", spec, random_state_dict(spec, seed),
                     build_byte_level_tokenizer_json())
    snac_dir = Path(write_random_snac(tmp / "snac", seed))
    try:
        snac_rel = snac_dir.resolve().relative_to(tmp.resolve()).as_posix()
    except ValueError:
        raise RuntimeError(f"write_random_snac wrote to {snac_dir}, outside {tmp}") from None
    files = {p.relative_to(tmp).as_posix(): _sha256(p)
             for p in sorted(tmp.rglob("*")) if p.is_file()}
    manifest = {"version": DEMO_VERSION, "seed": seed, "model_dir": "model", "snac_dir": snac_rel,
                "files": files, "content_hash": _content_hash(files)}
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n",
                                encoding="utf-8")


def write_demo_model(out_dir: str | os.PathLike[str], voices=None,
                     cache_dir: Path | None = None) -> Path:
    """A copy of the demo model in `out_dir` (HF layout) that ships `voices` (a
    core.voices.VoiceRegistry) as its voices.json, so a server given model.path=out_dir
    serves exactly those voices: how tests stand in for a multilingual checkpoint. Without
    `voices` the copy has no voices.json (the English fallback applies). Returns out_dir."""
    from orpheus_svc.models.voices import write_voices_file

    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out}: not empty; write the demo model into an empty directory")
    shutil.copytree(ensure_demo_checkpoint(cache_dir).model_dir, out, dirs_exist_ok=True)
    if voices is not None:
        write_voices_file(out, voices)
    return out


def ensure_demo_checkpoint(cache_dir: Path | None = None) -> DemoPaths:
    """Return the demo checkpoint under `cache_dir` (default: default_cache_dir()),
    building it first if it is missing or incomplete. Safe to call from racing processes.
    """
    root = Path(cache_dir if cache_dir is not None else default_cache_dir()).expanduser()
    final = root / DEMO_VERSION
    found = _read_complete(final)
    if found is not None:
        return found
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{DEMO_VERSION}.building-", dir=root))
    try:
        log.info("building the random demo checkpoint in %s", final)
        _build(tmp, DEMO_SEED)
        for attempt in range(3):
            try:
                os.rename(tmp, final)  # atomic; fails if a directory is already there
                break
            except OSError:
                found = _read_complete(final)
                if found is not None:  # lost the race to a complete copy: use it
                    return found
                if attempt == 2:
                    raise
                # A broken or stale copy is in the way: move it aside, then take its place.
                stale = root / f".{DEMO_VERSION}.stale-{uuid.uuid4().hex}"
                try:
                    os.rename(final, stale)
                except FileNotFoundError:
                    pass
                shutil.rmtree(stale, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # no-op after a successful rename
    found = _read_complete(final)
    if found is None:
        raise RuntimeError(f"demo checkpoint in {final} is incomplete right after building it")
    return found
