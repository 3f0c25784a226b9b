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
    # the weight-only FP8 GEMM at 8 rows: no activation quantisation kernel
    assert summary["graph_nodes"]["fp8"] <= summary["graph_nodes"]["bf16"]
    assert set(summary["graph_nodes_by_bucket"]["bf16"]) == {"1", "8"}  # every timed bucket
    # the path each fp8 bucket runs (off CUDA by rule: weight-only up to 64 rows)
    assert {path for by_m in summary["fp8_paths"]["fp8"].values() for path in by_m.values()} \
        == {"weight_only"}
    # the CPU captures nothing: the dry run must not claim a comparison it did not make
    assert parity["uncaptured_vs_captured"] == {"skipped": "no CUDA graphs on the CPU"}
    # issue 45 item 5: every acceptance field, a number or null with its reason
    assert_acceptance_fields(summary)
    assert summary["server_step_ratio"] > 0 and summary["server_step"]["sessions"] == 2
    assert summary["server_step"]["basis"] == "step_ms"  # nothing captured on the CPU
    assert summary["snac_gpu_share"] is None  # one pass (SNAC_SHARE=1 runs the null codec too)
    assert summary["device_ms"] is None and "device_ms: no CUDA graphs on the CPU" in \
        summary["missing"]
    assert doc["checkpoint"]["dir"] == env["CKPT"]


# issue 45 item 5: the acceptance's fields, each a number (or a map of them) or null with its
# reason in "missing"
ACCEPTANCE = {"server_step_ratio": (int, float), "snac_gpu_share": (int, float),
              "ahead_share": (int, float), "graph_nodes": dict, "parity": dict,
              "step_ms": dict, "device_ms": dict, "seeded_step_ms": dict,
              "seeded_device_ms": dict, "seeded_row_identical": dict}


def assert_acceptance_fields(summary):
    assert set(gpu_engine.ACCEPTANCE) == set(ACCEPTANCE)
    missing = {m.split(":")[0]: m for m in summary["missing"]}
    for key, kind in ACCEPTANCE.items():
        assert key in summary, key
        v = summary[key]
        if v is None:
            assert key in missing and missing[key].split(": ", 1)[1], (key, summary["missing"])
        else:
            assert isinstance(v, kind) and not isinstance(v, bool), (key, v)


def test_each_section_is_on_disk_as_it_finishes_and_the_checkpoint_comes_first(
        tmp_path, monkeypatch):
    """A section that raises is recorded and the rest go on; one that kills the run (a
    timeout) leaves the earlier sections' figures in both files; the checkpoint is written
    before any section."""
    import orpheus_svc.models.loader as loader
    out = tmp_path / "out"
    seen = []

    def on_disk():
        return (json.loads((out / "gpu-engine.json").read_text()),
                json.loads((out / "summary.json").read_text()))

    def checkpoint(path, *a, **k):
        doc, summary = on_disk()
        seen.append(("checkpoint", [s for s in ("env", "hf") if s in doc]))
        assert_acceptance_fields(summary)  # complete from the first write

    def killed(*_):
        doc, summary = on_disk()
        seen.append(("killed", doc["hf"], doc["broken"]["error"], summary["hf_tokens_per_s"]))
        raise KeyboardInterrupt  # not an Exception: the run ends here, as a timeout's would

    def broken(*_):
        raise RuntimeError("planted")
    monkeypatch.setattr(loader, "write_checkpoint", checkpoint)
    monkeypatch.setitem(gpu_engine.SECTIONS, "hf", lambda *_: {"tokens_per_s": 12.5})
    monkeypatch.setitem(gpu_engine.SECTIONS, "broken", broken)
    monkeypatch.setitem(gpu_engine.SECTIONS, "killed", killed)
    args = ["--device", "cpu", "--tiny", "--out", str(out), "--write-checkpoint",
            str(tmp_path / "ckpt"), "--sections", "hf,broken,nosuch,killed,snac"]
    try:
        gpu_engine.main(args)
        raise AssertionError("the killed section ended nothing")
    except KeyboardInterrupt:
        pass
    assert seen[0] == ("checkpoint", [])
    assert seen[1][:3] == ("killed", {"tokens_per_s": 12.5, "section_s": seen[1][1]["section_s"]},
                           "RuntimeError: planted")
    assert seen[1][3] == 12.5
    doc, summary = on_disk()
    assert doc["nosuch"]["error"] == "ValueError: unknown section nosuch"
    assert "snac" not in doc and "killed" not in doc and summary["hf_tokens_per_s"] == 12.5
    assert_acceptance_fields(summary)
    assert summary["server_step_ratio"] is None and "has not run" in " ".join(summary["missing"])


def _serve_summary(rows):
    run = {"ttfb_ms": {"p95": 100.0}, "underruns": {"sessions_with_underrun": 0},
           "succeeded": 4, "sessions": 4, "slo": {"pass": True}}
    return {"runs": [dict(run, concurrency=c, server={"steps_per_s": sps, "mean_batch": mb,
                                                      "steps": 100})
                     for c, sps, mb in rows]}


def test_the_server_part_of_the_summary(tmp_path):
    """server_step_ratio: the server's step period at 128 sessions over the bench's device
    time at the batch nearest its mean batch; snac_gpu_share from the null-codec pass at the
    same level; with nothing measured, every field null with its reason."""
    (tmp_path / "summary.json").write_text(json.dumps(gpu_engine.complete({
        "card": "H200", "device_ms": {"bf16": {"1": 4.0, "64": 6.0, "256": 10.0}},
        "step_ms": {"bf16": {"1": 4.5, "64": 6.5, "256": 11.0}}})))
    (tmp_path / "serve.summary.json").write_text(json.dumps(_serve_summary(
        [(128, 80.0, 70.0), (256, 40.0, 170.0)])))  # 12.5 ms at mean batch 70, 25 ms
    (tmp_path / "serve-null.summary.json").write_text(json.dumps(_serve_summary(
        [(128, 100.0, 70.0), (256, 50.0, 170.0)])))  # 10 ms with the null codec
    (tmp_path / "server-steps.txt").write_text(
        "x run-ahead: 1 of 2 steps (50.0%) since the last report; in all "
        "{'steps': 10, 'ahead': 9, 'share': 0.9}\n")
    got = gpu_engine.finish(tmp_path, "none rowwise")
    assert got["server_step_ratio"] == round(12.5 / 6.0, 3)  # batch 64 nearest 70
    assert got["server_step"]["basis"] == "device_ms" and got["server_step"]["sessions"] == 128
    assert got["snac_gpu_share"] == 0.2 and got["ahead_share"] == 0.9
    assert [r["null_codec"] for r in got["server"]] == [False, False, True, True]
    assert json.loads((tmp_path / "summary.json").read_text()) == got
    assert_acceptance_fields(got)
    empty = tmp_path / "empty"
    empty.mkdir()
    got = gpu_engine.finish(empty)
    assert_acceptance_fields(got)
    assert all(got[k] is None for k in ACCEPTANCE) and len(got["missing"]) == len(ACCEPTANCE)
