"""Demo checkpoint: deterministic, reused, rebuilt when damaged, race-safe, loadable."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest
import torch

from orpheus_svc.core.tokens import AUDIO_BASE, ORPHEUS_VOCAB_SIZE
from orpheus_svc.models import demo
from orpheus_svc.models.demo import DEMO_VERSION, demo_spec, ensure_demo_checkpoint
from orpheus_svc.models.loader import load_checkpoint


@pytest.fixture
def snac_calls(monkeypatch) -> list[Path]:
    """Replace write_random_snac with a fast deterministic stub; records each call."""
    calls: list[Path] = []

    def write_random_snac(out_dir, seed):
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text(json.dumps({"stub": True, "seed": seed}))
        calls.append(out)
        return out

    module = types.ModuleType("orpheus_svc.audio.codec")
    module.write_random_snac = write_random_snac
    monkeypatch.setitem(sys.modules, "orpheus_svc.audio.codec", module)
    return calls


def test_same_content_hash_in_fresh_directories_with_the_real_snac(tmp_path):
    pytest.importorskip("snac")
    first = ensure_demo_checkpoint(tmp_path / "a")
    second = ensure_demo_checkpoint(tmp_path / "b")
    assert first.content_hash == second.content_hash
    assert (first.model_dir / "model.safetensors").read_bytes() == \
        (second.model_dir / "model.safetensors").read_bytes()
    assert any(first.snac_dir.iterdir())
    assert first.model_dir == tmp_path / "a" / DEMO_VERSION / "model"


def test_model_files_stay_small(tmp_path, snac_calls):
    paths = ensure_demo_checkpoint(tmp_path)
    total = sum(p.stat().st_size for p in paths.model_dir.iterdir())
    assert total < 25_000_000


def test_present_checkpoint_is_reused_without_rebuilding(tmp_path, snac_calls):
    first = ensure_demo_checkpoint(tmp_path)
    mtime = (first.model_dir / "model.safetensors").stat().st_mtime_ns
    again = ensure_demo_checkpoint(tmp_path)
    assert again == first
    assert len(snac_calls) == 1
    assert (first.model_dir / "model.safetensors").stat().st_mtime_ns == mtime


def test_damaged_or_incomplete_checkpoint_is_rebuilt(tmp_path, snac_calls):
    first = ensure_demo_checkpoint(tmp_path)
    (first.model_dir / "config.json").write_text("{}")  # content no longer matches manifest
    again = ensure_demo_checkpoint(tmp_path)
    assert again.content_hash == first.content_hash and len(snac_calls) == 2
    (tmp_path / DEMO_VERSION / "manifest.json").unlink()  # as if a build died before the end
    assert ensure_demo_checkpoint(tmp_path).content_hash == first.content_hash
    assert len(snac_calls) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == [DEMO_VERSION]  # no temp dirs left


def test_losing_a_build_race_uses_the_winners_copy(tmp_path, snac_calls, monkeypatch):
    real_build = demo._build
    winner = {}

    def racing_build(tmp, seed):
        # While this build runs, another "process" finishes and renames its copy into place.
        monkeypatch.setattr(demo, "_build", real_build)
        winner["paths"] = ensure_demo_checkpoint(tmp_path)
        real_build(tmp, seed)

    monkeypatch.setattr(demo, "_build", racing_build)
    loser = ensure_demo_checkpoint(tmp_path)
    assert loser == winner["paths"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [DEMO_VERSION]


def test_cache_dir_defaults_to_env_variable(tmp_path, snac_calls, monkeypatch):
    monkeypatch.setenv("ORPHEUS_SVC_CACHE", str(tmp_path / "cache"))
    paths = ensure_demo_checkpoint()
    assert paths.model_dir == tmp_path / "cache" / DEMO_VERSION / "model"


def test_demo_loads_and_gives_finite_varied_logits(tmp_path, snac_calls):
    ck = load_checkpoint(ensure_demo_checkpoint(tmp_path).model_dir)
    spec = ck.spec
    assert spec == demo_spec()
    assert spec.vocab_size == ORPHEUS_VOCAB_SIZE and spec.tie_word_embeddings
    assert ck.state_dict["model.embed_tokens.weight"].dtype == torch.float32  # CPU default
    assert torch.equal(ck.state_dict["model.norm.weight"], torch.ones(spec.hidden_size))
    std = ck.state_dict["model.layers.0.mlp.up_proj.weight"].std().item()
    assert 0.015 < std < 0.025  # N(0, 0.02) like HF init
    # Embedding -> final RMSNorm -> tied head, restricted to frame position 0's ids.
    h = ck.state_dict["model.embed_tokens.weight"][ck.tokenizer.encode("tara: hi")]
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + spec.rms_norm_eps)
    logits = h @ ck.lm_head_weight[AUDIO_BASE:AUDIO_BASE + 4096].T
    assert torch.isfinite(logits).all()
    assert logits.std() > 0.05
