"""Start-up errors of the trtllm backend name the missing piece (the real import path, no GPU)."""

import dataclasses
import importlib.util
import subprocess
import sys

import pytest

from orpheus_svc.config import Config, ConfigError, EngineConfig
from orpheus_svc.engine.trtllm.build import build_trtllm_backend
from orpheus_svc.engine.trtllm.gpu import GpuInfo
from orpheus_svc.engine.trtllm.manifest import (
    FORMAT_CHECKPOINT,
    FORMAT_ENGINE,
    Limits,
    Manifest,
    ManifestError,
    read_manifest,
)
from orpheus_svc.engine.trtllm.startup import TrtllmStartupError, require_fp8_gpu
from orpheus_svc.models.tokenizer import build_byte_level_tokenizer_json

HAS_TRTLLM = importlib.util.find_spec("tensorrt_llm") is not None


def _config(engine_dir=None, **engine):
    e = dataclasses.replace(EngineConfig(), backend="trtllm", trtllm_engine_dir=engine_dir,
                            **engine)
    return dataclasses.replace(Config(), engine=e)


def _artifact(tmp_path, fmt=FORMAT_ENGINE, batch=32, seq=4096, tokenizer=True):
    Manifest(format=fmt, model="canopylabs/orpheus-3b-0.1-ft",
             precision={"weights": "fp8", "activations": "fp8", "kv_cache": "float16"},
             limits=Limits(batch, seq, 8192)).write(tmp_path)
    if tokenizer:
        (tmp_path / "tokenizer.json").write_text(build_byte_level_tokenizer_json())
    return str(tmp_path)


def test_backend_and_builder_modules_import_with_tensorrt_llm_and_modelopt_blocked():
    # None in sys.modules makes any import of the name fail: a top-level import would show.
    code = ("import sys; sys.modules['tensorrt_llm'] = None; sys.modules['modelopt'] = None; "
            "import orpheus_svc.engine.trtllm.build, engine_builder.cli, engine_builder.artifacts")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_a_missing_engine_dir_setting_is_named():
    with pytest.raises(TrtllmStartupError, match="engine.trtllm_engine_dir is not set"):
        build_trtllm_backend(_config(None))


def test_a_dir_without_manifest_says_how_to_build_one(tmp_path):
    with pytest.raises(TrtllmStartupError, match="orpheus_manifest.json not found.*orpheus-build"):
        build_trtllm_backend(_config(str(tmp_path)))


def test_an_engine_built_for_fewer_slots_or_shorter_context_is_refused(tmp_path):
    path = _artifact(tmp_path, batch=16, seq=2048)
    with pytest.raises(TrtllmStartupError) as err:
        build_trtllm_backend(_config(path, max_sessions=32, max_seq_len=4096))
    msg = str(err.value)
    assert "max_sessions 32 > the engine's max_batch_size 16" in msg
    assert "max_seq_len 4096 > the engine's max_seq_len 2048" in msg
    assert "--max-batch-size 32 --max-seq-len 4096" in msg


def test_a_missing_tokenizer_is_named(tmp_path):
    path = _artifact(tmp_path, fmt=FORMAT_CHECKPOINT, tokenizer=False)
    with pytest.raises(TrtllmStartupError, match="no tokenizer.json"):
        build_trtllm_backend(_config(path))


@pytest.mark.skipif(HAS_TRTLLM, reason="tensorrt_llm is installed here")
def test_without_tensorrt_llm_the_real_import_path_says_what_to_install(tmp_path):
    with pytest.raises(TrtllmStartupError) as err:
        build_trtllm_backend(_config(_artifact(tmp_path)))
    msg = str(err.value)
    assert "tensorrt_llm package is not installed" in msg and "tensorrt-llm~=1.2.0" in msg
    assert isinstance(err.value, ConfigError)  # the CLI reports it as a configuration error


@pytest.mark.parametrize("gpu,expect", [
    (None, "no CUDA GPU is visible"),
    (GpuInfo("NVIDIA A100-SXM4-80GB", (8, 0)), "compute capability 8.0 (sm80); FP8 needs 8.9"),
    (GpuInfo("NVIDIA GeForce RTX 3090", (8, 6)), "8.6 (sm86)"),
])
def test_gpus_without_fp8_are_refused_by_name(gpu, expect):
    with pytest.raises(TrtllmStartupError, match=expect.replace("(", r"\(").replace(")", r"\)")):
        require_fp8_gpu(lambda: gpu)


@pytest.mark.parametrize("cap", [(8, 9), (9, 0), (10, 0)])
def test_ada_hopper_and_newer_pass_the_gpu_check(cap):
    gpu = GpuInfo("gpu", cap)
    assert require_fp8_gpu(lambda: gpu) is gpu


def test_the_manifest_round_trips_and_names_a_missing_field(tmp_path):
    _artifact(tmp_path, fmt=FORMAT_CHECKPOINT, batch=24, seq=3072)
    m = read_manifest(tmp_path)
    assert m.runtime == "pytorch" and m.limits == Limits(24, 3072, 8192)
    (tmp_path / "orpheus_manifest.json").write_text('{"format": "tensorrt-engine"}')
    with pytest.raises(ManifestError, match="missing field 'limits'"):
        read_manifest(tmp_path)
