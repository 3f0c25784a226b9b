"""bench/gpu_torch.py, the GPU check of the torch backend, run here on the CPU: what can be
checked without a GPU (the script's sections, its JSON, its token comparison)."""

import importlib.util
import json
from pathlib import Path

_SPEC = importlib.util.spec_from_file_location(
    "gpu_torch", Path(__file__).resolve().parents[2] / "bench" / "gpu_torch.py")
gpu_torch = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(gpu_torch)


def test_first_difference_finds_where_two_token_streams_part():
    assert gpu_torch.first_difference([1, 2, 3], [1, 2, 3]) is None
    assert gpu_torch.first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert gpu_torch.first_difference([1, 2], [1, 2, 3]) == 2


def test_the_cpu_dry_run_times_every_attention_variant_on_its_own_kernels(tmp_path):
    out = tmp_path / "gpu.json"
    assert gpu_torch.main(["--device", "cpu", "--tiny", "--batches", "1,2", "--context", "32",
                           "--sections", "grammar,attention,decode", "--output", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["grammar"]["no_stream"] is True
    attention = doc["attention"]
    assert set(gpu_torch.VARIANTS) <= set(attention)
    for name in gpu_torch.VARIANTS:
        assert set(attention[name]["step_ms"]) == {"1", "2"}
        assert all(ms > 0 for ms in attention[name]["step_ms"].values())
    assert "aten::_scaled_dot_product_attention_math" in attention["math_grouped"]["attention_ops"]
    assert doc["decode"]["spec"] == "demo" and set(doc["decode"]["step_ms"]) == {"1", "2"}
    assert "error" not in doc["decode"] and "error" not in attention
