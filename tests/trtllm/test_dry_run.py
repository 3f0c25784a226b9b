"""orpheus-build-engine --dry-run: the plan for several flag sets, refusals and their reasons."""

import dataclasses
import json
import sys

import pytest

from engine_builder.cli import main
from engine_builder.plan import BuildRequest, PlanError, make_plan
from orpheus_svc.engine.trtllm.gpu import GpuInfo
from orpheus_svc.models.demo import demo_spec

ORPHEUS = "canopylabs/orpheus-3b-0.1-ft"
RTX4090 = GpuInfo("NVIDIA GeForce RTX 4090", (8, 9))


def _kv(slots, layers, kv_heads, head_dim, seq, nbytes):
    return slots * layers * 2 * kv_heads * head_dim * seq * nbytes


def _dry(capsys, *flags, gpu=RTX4090, out="/tmp/orpheus-fp8"):
    code = main(["--model", ORPHEUS, "--out", out, "--dry-run", *flags], gpu_probe=lambda: gpu)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_default_plan_is_fp8_weights_fp16_kv_32_slots_of_4k(capsys):
    code, out, _ = _dry(capsys)
    assert code == 0
    expected = _kv(32, 28, 8, 128, 4096, 2)
    assert expected == 15_032_385_536  # 14.0 GiB; the seed's "~7.3 GB" is half of this
    assert f"= {expected:,} bytes = 15.03 GB (14.00 GiB)" in out
    assert "weights fp8 (e4m3), activations fp8, KV cache float16" in out
    assert "max_batch_size 32, max_seq_len 4096, max_num_tokens 8192" in out
    assert "pytorch: FP8 HF checkpoint" in out and "RTX 4090 (sm89): FP8 ok" in out


@pytest.mark.parametrize("flags,slots,seq,nbytes", [
    (["--max-batch-size", "16", "--max-seq-len", "2048"], 16, 2048, 2),
    (["--max-batch-size", "8", "--kv-cache-dtype", "bf16"], 8, 4096, 2),
    (["--backend", "tensorrt", "--max-batch-size", "24", "--max-seq-len", "3072",
      "--max-num-tokens", "4096"], 24, 3072, 2),
])
def test_the_kv_estimate_follows_the_formula_for_each_flag_set(capsys, flags, slots, seq, nbytes):
    code, out, _ = _dry(capsys, *flags)
    assert code == 0
    assert f"{slots} slots x 28 layers x 2 x 8 kv heads x 128 dim x {seq} tokens" in out
    assert f"= {_kv(slots, 28, 8, 128, seq, nbytes):,} bytes" in out


def test_the_tensorrt_plan_names_its_api_and_the_upstream_deprecation(capsys):
    code, out, _ = _dry(capsys, "--backend", "tensorrt", "--calib-dataset", "/data/calib")
    assert code == 0
    assert "tensorrt_llm._tensorrt_engine.LLM (QuantConfig FP8" in out
    assert "512 samples of /data/calib" in out and "deprecated upstream" in out


def test_shapes_come_from_a_local_config_json(tmp_path, capsys):
    spec = dataclasses.replace(demo_spec(), num_hidden_layers=3)
    (tmp_path / "config.json").write_text(json.dumps(spec.to_dict()))
    code = main(["--model", str(tmp_path), "--out", str(tmp_path / "out"), "--dry-run",
                 "--max-batch-size", "4", "--max-seq-len", "128"], gpu_probe=lambda: RTX4090)
    out = capsys.readouterr().out
    expected = _kv(4, 3, spec.num_key_value_heads, spec.head_dim, 128, 2)
    assert code == 0 and f"= {expected:,} bytes" in out and "config.json" in out


@pytest.mark.parametrize("flags,reason", [
    (["--quantization", "int4_awq"], "INT4/INT8 weight quantization is refused"),
    (["--quantization", "w4a16"], "INT4/INT8 weight quantization is refused"),
    (["--quantization", "int8"], "INT4/INT8 weight quantization is refused"),
    (["--quantization", "w8a8"], "INT8 activation quantization is refused"),
    (["--quantization", "int8_sq"], "INT8 activation quantization is refused"),
    (["--kv-cache-dtype", "int8"], "an INT8 KV cache is refused"),
])
def test_int4_and_int8_are_refused_with_the_prosody_reason(capsys, flags, reason):
    code, out, err = _dry(capsys, *flags)
    assert code == 2 and out == ""
    assert reason in err and "prosody flattening" in err


@pytest.mark.parametrize("flags,reason", [
    (["--kv-cache-dtype", "fp8"], "FP8 KV cache is not the validated strategy"),
    (["--quantization", "nvfp4"], "not validated for Orpheus audio quality"),
    (["--max-num-tokens", "16"], "--max-num-tokens 16 must be >= --max-batch-size 32"),
    (["--max-seq-len", "32"], "--max-seq-len must be in 64..131072"),
])
def test_other_refusals_say_why(capsys, flags, reason):
    code, _, err = _dry(capsys, *flags)
    assert code == 2 and reason in err


def test_all_refusals_are_reported_at_once():
    with pytest.raises(PlanError) as err:
        make_plan(BuildRequest(model=ORPHEUS, out="/tmp/x", quantization="int4",
                               kv_cache_dtype="int8", calib_size=0))
    assert len(err.value.reasons) == 3


@pytest.mark.parametrize("gpu,line", [
    (None, "NOT READY: no CUDA GPU is visible"),
    (GpuInfo("NVIDIA A100-SXM4-80GB", (8, 0)), "NOT READY: NVIDIA A100-SXM4-80GB is compute "
                                                "capability 8.0 (sm80); FP8 needs 8.9"),
    (GpuInfo("NVIDIA H100 80GB HBM3", (9, 0)), "NVIDIA H100 80GB HBM3 (sm90): FP8 ok"),
])
def test_the_plan_reports_whether_the_gpu_can_run_fp8(capsys, gpu, line):
    code, out, _ = _dry(capsys, gpu=gpu)
    assert code == 0 and line in out


def test_a_real_build_without_an_fp8_gpu_stops_before_touching_anything(tmp_path, capsys):
    out_dir = tmp_path / "engine"
    code = main(["--model", ORPHEUS, "--out", str(out_dir)],
                gpu_probe=lambda: GpuInfo("NVIDIA A100-SXM4-80GB", (8, 0)))
    assert code == 3 and "cannot build here" in capsys.readouterr().err
    assert not out_dir.exists()


def test_the_dry_run_imports_neither_tensorrt_llm_nor_modelopt(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt_llm", None)  # an import attempt would raise
    monkeypatch.setitem(sys.modules, "modelopt", None)
    for backend in ("tensorrt", "pytorch"):
        code, out, _ = _dry(capsys, "--backend", backend)
        assert code == 0 and "dry run" in out
