"""scripts/gpu-engine-check.sh and bench/gpu_engine.py, the graph engine's GPU check, run
here as their CPU dry run (tiny model, no CUDA graphs, the torch attention, the real server
on the CPU): every section runs and the summary has the shape issue 28 names."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_SPEC = importlib.util.spec_from_file_location("gpu_engine", ROOT / "bench" / "gpu_engine.py")
gpu_engine = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(gpu_engine)


def test_agreement_finds_the_first_difference_and_the_shares():
    a = {0: list(range(14)), 1: list(range(14))}
    b = {0: list(range(14)), 1: list(range(9)) + [99] + list(range(10, 14))}
    got = gpu_engine.agreement(a, b)
    assert not got["identical"] and got["first_difference"] == 9
    assert got["first_difference_per_row"] == [None, 9]
    assert got["token_share_identical"] == round(27 / 28, 4)
    assert got["frame_share_identical"] == 0.75  # row 1's second frame differs
    assert gpu_engine.agreement(a, a)["identical"]


def test_the_floor_counts_the_weights_a_step_reads_once_and_every_rows_kv():
    """Issue 32: the step reads the LM head's 7 x 4096 audio rows and the stop row (28,673
    of its 156,940 rows: 176 MB in bf16, not the whole 964 MB)."""
    from orpheus_svc.models.llama_config import orpheus_3b_spec
    spec = orpheus_3b_spec()
    head_read = 28_673 * 3072 * 2
    layers = 3_300_867_072 - 482_119_680  # all parameters but the head's
    ms, nbytes = gpu_engine.floor_ms(spec, "none", 64, 500, 3350.0)
    assert head_read == 176_166_912
    assert nbytes == head_read + layers * 2 + 64 * 500 * 114_688
    assert ms == round(nbytes / 3350e9 * 1000, 3)
    _, fp8 = gpu_engine.floor_ms(spec, "fp8", 1, 500, None)
    assert fp8 == head_read + layers + 500 * 114_688  # the head stays bf16


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_cpu_dry_run_of_the_whole_check(tmp_path):
    out = tmp_path / "out"
    env = dict(os.environ, DEVICE="cpu", TINY="1", PYTHON=sys.executable, LEVELS="2",
               SEQ="128", CKPT=str(tmp_path / "ckpt"), ORPHEUS_SVC_CACHE=str(tmp_path / "cache"),
               PORT=str(_free_port()))
    env.pop("SWITCH_INTERVAL", None)
    run = subprocess.run(["bash", str(ROOT / "scripts" / "gpu-engine-check.sh"), str(out)],
                         env=env, capture_output=True, text=True, timeout=400)
    assert run.returncode == 0, run.stderr[-3000:]
    doc = json.loads((out / "gpu-engine.json").read_text())
    for section in ("env", "kernel", "fp8gemm", "steps", "hf", "snac"):
        assert "error" not in doc[section], (section, doc[section])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["card"] == "cpu-dry-run"
    assert summary["fp8_gemm"] in ("rowwise", "tensorwise")
    for key in ("step_ms", "ahead_ms", "eager_step_ms", "floor_ms"):
        assert set(summary[key]) >= {"bf16", "fp8"}
        assert set(summary[key]["bf16"]) == {"1", "8"}
    assert all(ms > 0 for ms in summary["step_ms"]["fp8"].values())
    # issue 47: the seeded step's time beside the unseeded one, and one seeded row's bits
    # the same at every batch size
    assert set(summary["seeded_step_ms"]["bf16"]) == {"1", "8"}
    assert all(ms > 0 for ms in summary["seeded_step_ms"]["fp8"].values())
    assert summary["seeded_row_identical"]["bf16"] is True
    assert summary["seeded_row_identical"]["fp8"] is True
    assert doc["steps"]["bf16"]["seeded_row"]["batch_sizes"] == [1, 2, 3, 5, 8]
    assert summary["hf_tokens_per_s"] > 0 and summary["ours_tokens_per_s"] > 0
    (level,) = summary["server"]
    assert level["sessions"] == 2 and level["ok"] and "ttfb_p95_ms" in level
    # issue 32 item 2: the server's run-ahead record (engine/ahead.py), from its log
    assert 0 < summary["ahead_share"] <= 1 and summary["ahead"]["steps"] > 0
    assert doc["kernel"]["uniforms_equal_host"] is True
    parity = doc["steps"]["bf16"]["parity"]
    assert parity["graph_vs_eager"]["identical"]  # float32 on the CPU: the same tokens
    # issue 32: the teacher-forced parity and the step's kernel count, in the summary too
    tf = parity["teacher_forced"]
    assert tf["top1_agreement"] == 1.0 and tf["max_abs_logit_diff"] < 1e-3  # float32, CPU
    assert summary["parity"] == {k: tf[k] for k in ("top1_agreement", "max_abs_logit_diff")}
    assert set(summary["graph_nodes"]) >= {"bf16", "fp8"}
    assert summary["graph_nodes"]["fp8"] > summary["graph_nodes"]["bf16"]  # activation quant
    # the CPU captures nothing: the dry run must not claim a comparison it did not make
    assert parity["uncaptured_vs_captured"] == {"skipped": "no CUDA graphs on the CPU"}
