"""PEFT adapter directories at start-up (models/adapters.py, runtime.py): what is served
and what is refused, each refusal naming the file and the field or tensor at fault, and a
voice's adapter slot in the requests a session builds. The adapters are made by the real
peft (tests/engine/lora_fixtures.py)."""

import json
import shutil
import warnings

import pytest
import torch

from orpheus_svc.config import ConfigError, load_config
from orpheus_svc.core.lora_config import AdapterError
from orpheus_svc.engine.trtllm.build import refuse_adapters
from orpheus_svc.engine.trtllm.startup import TrtllmStartupError
from orpheus_svc.models.adapters import read_adapter
from orpheus_svc.models.demo import demo_spec
from orpheus_svc.runtime import build_runtime

from .lora_fixtures import ALL_MODULES, base_weights, make_demo_adapter
from .tiny import tiny_spec


@pytest.fixture(scope="module")
def demo_adapter(tmp_path_factory):
    return make_demo_adapter(tmp_path_factory.mktemp("demo") / "nova")


def _copy(src, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(src, dst)
    return dst


def test_a_peft_adapter_is_read_with_its_voices(peft_adapters):
    _, paths = peft_adapters
    ad = read_adapter(paths["plain"], tiny_spec(), 16)
    assert ad.info()["rank"] == 8 and ad.spec.scaling == 2.0
    assert ad.modules == [m for m in ALL_MODULES] and len(ad.layers) == 2
    assert ad.voices.names == ["nova"]
    rs = read_adapter(paths["rs"], tiny_spec(), 16)
    assert rs.modules == ["q_proj", "v_proj", "down_proj"] and rs.spec.use_rslora


@pytest.mark.parametrize("break_it, words", [
    (lambda d: (d / "adapter_model.safetensors").unlink(), "adapter_model.safetensors is missing"),
    (lambda d: (d / "adapter_config.json").unlink(), "adapter_config.json"),
    (lambda d: (d / "voices.json").unlink(), "the adapter brings no voices"),
    (lambda d: _edit(d, use_dora=True), "use_dora is True: DoRA"),
    (lambda d: _edit(d, bias="lora_only"), "bias is 'lora_only'"),
    (lambda d: _edit(d, modules_to_save=["lm_head"]), "modules_to_save is set"),
    (lambda d: _edit(d, r=4), "down_proj.lora_A.weight has shape [8, 128], the base model "
                              "needs [4, 128] (r=4 in adapter_config.json)"),
])
def test_a_bad_adapter_directory_is_refused_naming_what(peft_adapters, tmp_path, break_it,
                                                        words):
    _, paths = peft_adapters
    d = _copy(paths["plain"], tmp_path)
    break_it(d)
    with pytest.raises(AdapterError) as err:
        read_adapter(d, tiny_spec(), 16)
    assert words in str(err.value)


def _edit(d, **fields):
    path = d / "adapter_config.json"
    raw = json.loads(path.read_text())
    raw.update(fields)
    path.write_text(json.dumps(raw))


def test_an_adapter_for_another_base_model_is_refused(peft_adapters, demo_adapter):
    _, paths = peft_adapters
    wider = tiny_spec(intermediate_size=256)
    with pytest.raises(AdapterError, match=r"down_proj.lora_A.weight has shape \[8, 128\], the "
                                           r"base model needs \[8, 256\]"):
        read_adapter(paths["plain"], wider, 16)
    with pytest.raises(AdapterError, match=r"adapts layer 2, the base model has 2 layers"):
        read_adapter(_three_layers(paths["plain"]), tiny_spec(), 16)
    with pytest.raises(AdapterError, match="r is 8, above this server's engine.max_lora_rank 4"):
        read_adapter(demo_adapter, demo_spec(), 4)


def _three_layers(src):
    """A copy of adapter `src` with a layer-2 tensor added (the base model has 2)."""
    from safetensors.torch import load_file, save_file

    dst = src.parent / (src.name + "-3layers")
    if not dst.exists():
        shutil.copytree(src, dst)
        t = load_file(str(dst / "adapter_model.safetensors"))
        key = "base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight"
        t[key.replace("layers.1", "layers.2")] = t[key].clone()
        save_file(t, str(dst / "adapter_model.safetensors"))
    return dst


def test_an_embedding_adapter_is_refused(tmp_path):
    from peft import LoraConfig, get_peft_model

    from .lora_fixtures import hf_base

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = get_peft_model(hf_base(base_weights(), torch.float32),
                               LoraConfig(r=4, target_modules=["embed_tokens", "q_proj"]))
        model.save_pretrained(str(tmp_path / "emb"))
    (tmp_path / "emb" / "voices.json").write_text('{"voices": ["emb"]}')
    with pytest.raises(AdapterError, match="embedding adapters are not applied"):
        read_adapter(tmp_path / "emb", tiny_spec(), 16)


@pytest.mark.parametrize("backend", ["torch", "sim"])
def test_the_runtime_serves_a_configured_adapter_by_voice_name(demo_adapter, backend):
    config = load_config(overrides={"model.adapters": {"nova-lora": str(demo_adapter)},
                                    "engine.backend": backend, "engine.max_sessions": 2},
                         environ={})
    runtime = build_runtime(config)
    caps = runtime.engine.backend.capabilities
    assert (caps.max_adapters, caps.max_lora_rank) == (1, 8)
    assert runtime.adapters == {"nova-lora": 0}
    assert runtime.voices.resolve("nova").adapter == "nova-lora"
    assert runtime.voices.default == "tara" and runtime.voices.resolve("tara").adapter is None
    assert runtime.request("s", 0, "Nova", "Hi.").adapter == 0
    assert runtime.request("s", 0, "tara", "Hi.").adapter == -1
    if backend == "torch":
        assert runtime.engine.backend.model.lora.adapted[0]  # installed in its slot


def test_a_bad_configured_adapter_stops_start_up_naming_it(demo_adapter, tmp_path):
    d = _copy(demo_adapter, tmp_path)
    _edit(d, use_dora=True)
    config = load_config(overrides={"model.adapters": {"nova": str(d)}}, environ={})
    with pytest.raises(ConfigError, match=r"^model.adapters.nova: .*use_dora is True"):
        build_runtime(config)
    config = load_config(overrides={"model.adapters": {"nova": str(tmp_path / "none")}},
                         environ={})
    with pytest.raises(ConfigError, match=r"^model.adapters.nova: .*no such directory"):
        build_runtime(config)
    config = load_config(overrides={"model.adapters": {"nova": str(demo_adapter)},
                                    "engine.max_adapters": 1, "engine.max_lora_rank": 4},
                         environ={})
    with pytest.raises(ConfigError, match="engine.max_lora_rank 4"):
        build_runtime(config)


def test_an_adapter_voice_may_not_take_a_base_voice_name(demo_adapter, tmp_path):
    d = _copy(demo_adapter, tmp_path)
    (d / "voices.json").write_text('{"voices": ["Tara"]}')
    config = load_config(overrides={"model.adapters": {"nova": str(d)}}, environ={})
    with pytest.raises(ConfigError, match="voice 'Tara' is already a voice of the base model"):
        build_runtime(config)


def test_the_trtllm_backend_refuses_adapters_naming_the_setting(demo_adapter):
    config = load_config(overrides={"model.adapters": {"nova": str(demo_adapter)}},
                         environ={})
    with pytest.raises(TrtllmStartupError, match=r"^model.adapters: the trtllm backend does "
                                                 r"not serve LoRA adapters"):
        refuse_adapters(config)
    with pytest.raises(TrtllmStartupError, match=r"^engine.max_adapters: "):
        refuse_adapters(load_config(overrides={"engine.max_adapters": 2}, environ={}))
    with pytest.raises(TrtllmStartupError, match=r"^model.adapter_dirs: "):
        refuse_adapters(load_config(overrides={"model.adapter_dirs": ["/adapters"]}, environ={}))
    refuse_adapters(load_config(environ={}))  # none: nothing to refuse


def test_an_entry_may_name_the_adapters_voices(demo_adapter, tmp_path):
    d = _copy(demo_adapter, tmp_path)
    (d / "voices.json").unlink()
    config = load_config(overrides={"model.adapters": {"kai": {"path": str(d),
                                                               "voices": "kai:de, kira"}},
                                    "engine.backend": "sim"}, environ={})
    runtime = build_runtime(config)
    kai, kira = runtime.voices.resolve("kai"), runtime.voices.resolve("kira")
    assert (kai.adapter, kai.language, kira.adapter) == ("kai", "de", "kai")
    assert runtime.request("s", 0, "kira", "Hi.").adapter == 0


def _offline_hub_cache(monkeypatch, root):
    """huggingface_hub offline, its cache at `root` (HF_HOME is read at import: the
    module's constants are pointed there too, as tests/models/test_loader.py does)."""
    import huggingface_hub.constants as hf_constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(root))
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(root / "hub"))
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    return root / "hub"


def test_a_hub_id_adapter_is_read_from_the_hub_cache(demo_adapter, tmp_path, monkeypatch):
    """model.adapters may name a hub id (owner/name[@revision]), resolved like model.path
    through huggingface_hub's snapshot_download: here offline, from a cache laid out as the
    hub client writes it (refs/<branch> -> snapshots/<commit>/files)."""
    from orpheus_svc.models.adapters import read_configured_adapters

    cache = _offline_hub_cache(monkeypatch, tmp_path / "hf")
    repo = cache / "models--voices-org--nova-orpheus-lora"
    main, other = "a" * 40, "b" * 40
    shutil.copytree(demo_adapter, repo / "snapshots" / main)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(main)
    (repo / "refs" / "v2").write_text(other)  # a revision whose snapshot is not cached
    config = load_config(overrides={"model.adapters": {"nova-lora": "voices-org/nova-orpheus-lora"}},
                         environ={})
    read = read_configured_adapters(config, demo_spec())
    [(name, weights)] = read.adapters
    assert name == "nova-lora" and weights.voices.names == ["nova"]
    assert weights.path == repo / "snapshots" / main
    # what the hub cannot give is a ConfigError naming the entry and what to do
    for ref, words in [("voices-org/nova-orpheus-lora@v2", "offline"),
                       ("voices-org/absent-lora", "offline")]:
        config = load_config(overrides={"model.adapters": {"nova-lora": ref}}, environ={})
        with pytest.raises(ConfigError, match=rf"^model.adapters.nova-lora: .*{words}"):
            read_configured_adapters(config, demo_spec())
