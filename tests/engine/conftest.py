"""Fixtures shared by the engine tests."""

import pytest


@pytest.fixture(scope="session")
def peft_adapters(tmp_path_factory):
    """(base weights, {name: adapter directory}) made once per run with the real peft
    (tests/engine/lora_fixtures.py): "plain" r=8 alpha=16 on every projection (voice nova),
    "rs" rsLoRA r=4 alpha=8 on q, v and down (voice orion)."""
    from .lora_fixtures import base_weights, make_adapter

    w = base_weights()
    root = tmp_path_factory.mktemp("adapters")
    return w, {"plain": make_adapter(root / "plain", w, r=8, alpha=16, seed=1, voice="nova"),
               "rs": make_adapter(root / "rs", w, r=4, alpha=8, rslora=True, seed=2,
                                  voice="orion", modules=["q_proj", "v_proj", "down_proj"])}
