"""Start-up checks of the trtllm backend, cheapest first; each error names the missing piece.

    artifact_dir      engine.trtllm_engine_dir is set and a directory
    load_manifest     it holds orpheus_manifest.json (written by orpheus-build-engine)
    (trtllm_rules.plan_llm checks the configured combination and limits in one place)
    load_encoder      a tokenizer.json for prompts (the artifact's, else model.path's)
    installed_version the tensorrt_llm version from its package metadata (no import), for
                      the rules that depend on it
    require_tensorrt_llm / require_fp8_gpu
                      the package imports; a CUDA GPU of compute capability 8.9+ is visible

Errors are TrtllmStartupError, a ConfigError, so the CLI reports them as configuration
problems. tensorrt_llm is imported only inside require_tensorrt_llm.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Callable

from orpheus_svc.config import ConfigError

from orpheus_svc.engine.trtllm.gpu import fp8_problem, probe_gpu
from orpheus_svc.engine.trtllm.manifest import Manifest, ManifestError, read_manifest

log = logging.getLogger(__name__)

SUPPORTED_SERIES = "1.2"
INSTALL_HINT = ("install TensorRT-LLM 1.2.x on a Linux machine with an NVIDIA GPU "
                "(pip install 'tensorrt-llm~=1.2.0', or the NGC image "
                "nvcr.io/nvidia/tensorrt-llm/release), or set engine.backend to torch or sim")


class TrtllmStartupError(ConfigError):
    """The trtllm backend cannot start; the message names what is missing and what to do."""


def artifact_dir(engine: Any) -> Path:
    ref = engine.trtllm_engine_dir
    if not ref:
        raise TrtllmStartupError(
            "engine.trtllm_engine_dir is not set: point it at the output of "
            "orpheus-build-engine (a TensorRT engine or FP8 checkpoint directory)")
    path = Path(os.path.expanduser(ref))
    if not path.is_dir():
        raise TrtllmStartupError(f"engine.trtllm_engine_dir {ref!r} is not a directory")
    return path


def load_manifest(path: Path) -> Manifest:
    try:
        return read_manifest(path)
    except ManifestError as exc:
        raise TrtllmStartupError(f"engine.trtllm_engine_dir: {exc}") from exc


def find_tokenizer(path: Path, model_path: str | None) -> Path:
    """The prompt tokenizer's file: the artifact's tokenizer.json (the builder copies it
    there), else model.path's."""
    candidates = [path / "tokenizer.json"]
    if model_path:
        candidates.append(Path(os.path.expanduser(model_path)) / "tokenizer.json")
    for file in candidates:
        if file.is_file():
            return file
    raise TrtllmStartupError(
        f"no tokenizer.json in engine.trtllm_engine_dir ({path}) or model.path "
        f"({model_path!r}): copy the Orpheus tokenizer.json next to the engine")


def load_encoder(path: Path, model_path: str | None) -> Callable[[str], list[int]]:
    """The prompt tokenizer (find_tokenizer's file)."""
    from orpheus_svc.models.tokenizer import TextTokenizer

    return TextTokenizer.from_file(find_tokenizer(path, model_path)).encode


def installed_version() -> str | None:
    """The installed tensorrt_llm's version from its distribution metadata, without importing
    it (that takes seconds and needs CUDA); None when it is not installed."""
    from importlib import metadata

    try:
        return metadata.version("tensorrt_llm")  # matches tensorrt-llm too (normalised)
    except metadata.PackageNotFoundError:
        return None


def require_tensorrt_llm() -> Any:
    """The tensorrt_llm module, or TrtllmStartupError saying how to get it."""
    try:
        import tensorrt_llm
    except ImportError as exc:
        raise TrtllmStartupError(
            f"engine.backend is 'trtllm' but the tensorrt_llm package is not installed "
            f"({exc}); {INSTALL_HINT}") from exc
    except Exception as exc:  # installed but broken: missing libcuda, MPI, ABI mismatch
        raise TrtllmStartupError(
            f"engine.backend is 'trtllm' but importing tensorrt_llm failed: "
            f"{exc.__class__.__name__}: {exc}; {INSTALL_HINT}") from exc
    version = str(getattr(tensorrt_llm, "__version__", "unknown"))
    if not version.startswith(SUPPORTED_SERIES + "."):
        log.warning("tensorrt_llm %s found; this backend was written against the %s.x API",
                    version, SUPPORTED_SERIES)
    return tensorrt_llm


def require_fp8_gpu(probe: Callable[[], Any] = probe_gpu) -> Any:
    gpu = probe()
    problem = fp8_problem(gpu)
    if problem is not None:
        raise TrtllmStartupError(f"engine.backend is 'trtllm': {problem}")
    return gpu
