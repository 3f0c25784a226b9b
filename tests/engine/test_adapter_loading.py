"""Loading LoRA adapters while serving, on the torch backend (server/adapter_admin.py, the
admin service's calls without gRPC): an adapter loaded into a running engine speaks exactly
as the same adapter loaded at start-up, and every refused load (a path outside
model.adapter_dirs, a bad PEFT directory, a full pool, a taken name or voice) names the
problem and changes nothing: not the catalog, not the voices, not a byte of the pool."""

import asyncio
import dataclasses
import json
import os
import shutil
from types import SimpleNamespace

import pytest
from safetensors.torch import load_file, save_file

from orpheus_svc.config import load_config
from orpheus_svc.core.events import Rejected
from orpheus_svc.core.request import SamplingParams
from orpheus_svc.core.status import Status
from orpheus_svc.runtime import build_runtime
from orpheus_svc.server.adapter_admin import AdapterAdmin, AdminError

from .lora_fixtures import make_demo_adapter

BASE = {"engine.backend": "torch", "engine.max_sessions": 2, "engine.max_batch_size": 2,
        "engine.max_seq_len": 128, "flusher.null_codec": True}


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    """model.adapter_dirs (`allowed`) with nova and orion inside it, and, outside it, a
    directory with a good adapter (`elsewhere`)."""
    root = tmp_path_factory.mktemp("lora-dirs")
    allowed, elsewhere = root / "allowed", root / "elsewhere"
    nova = make_demo_adapter(allowed / "nova", voice="nova", r=8, seed=3)
    make_demo_adapter(allowed / "orion", voice="orion", r=4, seed=4)
    shutil.copytree(nova, elsewhere / "outside")
    (elsewhere / "outside" / "voices.json").write_text('{"voices": ["stray"]}')
    return SimpleNamespace(allowed=allowed, elsewhere=elsewhere, nova=nova)


def _runtime(**overrides):
    runtime = build_runtime(load_config(overrides={**BASE, **overrides}, environ={}))
    runtime.start()
    return runtime


def _admin(runtime):
    return AdapterAdmin(SimpleNamespace(runtime=runtime, config=runtime.config))


def _tokens(runtime, voice, adapter=None, seed=11, text="Hello there, friend."):
    """The tokens the engine samples for one seeded generation (read off the backend)."""
    got, real_step = {}, runtime.engine.backend.step

    def spy(plan):
        result = real_step(plan)
        for gen_id, toks in result.tokens.items():
            got.setdefault(gen_id, []).extend(toks)
        return result

    runtime.engine.backend.step = spy
    try:
        req = runtime.request("s", 0, voice, text, SamplingParams(seed=seed), adapter=adapter)
        with runtime.open(dataclasses.replace(req, max_tokens=42)) as gen:
            for ev in gen.events(60):
                assert not isinstance(ev, Rejected), ev
            return got[gen.gen_id]
    finally:
        del runtime.engine.backend.step


def test_an_adapter_loaded_while_serving_speaks_as_at_start_up(dirs):
    at_start = _runtime(**{"model.adapters": {"nova-lora": str(dirs.nova)}})
    serving = _runtime(**{"model.adapter_dirs": [str(dirs.allowed)], "engine.max_adapters": 2,
                          "engine.max_lora_rank": 8})
    try:
        expected = _tokens(at_start, "nova")
        base = _tokens(serving, "nova", adapter=-1)  # the same prompt on the base model
        entry = asyncio.run(_admin(serving).load("nova-lora", str(dirs.nova)))
        assert (entry.slot, entry.rank, entry.voice_names) == (0, 8, ["nova"])
        assert serving.voices.resolve("nova").adapter == "nova-lora"
        assert serving.request("s", 0, "nova", "Hi.").adapter == 0
        assert _tokens(serving, "nova") == expected != base
        # an adapter served from start-up unloads the same way: with no session open its
        # slot is freed at once and zeroed on the engine thread (before the next command)
        entry, freed = _admin(at_start).unload("nova-lora")
        assert freed and at_start.voices.resolve("nova") is None
        _tokens(at_start, "tara")  # a later command: the clear ran before it
        pool = at_start.engine.backend.model.lora
        assert not pool.adapted[0]
        assert all(float(t[0].abs().sum()) == 0.0 for layer in pool.a + pool.b
                   for t in layer.values())
    finally:
        at_start.stop()
        serving.stop()


@pytest.fixture(scope="module")
def serving(dirs):
    """A running torch engine with a pool of 2 (rank <= 8), nova loaded while serving."""
    runtime = _runtime(**{"model.adapter_dirs": [str(dirs.allowed)], "engine.max_adapters": 2,
                          "engine.max_lora_rank": 8})
    asyncio.run(_admin(runtime).load("nova-lora", str(dirs.nova)))
    try:
        yield runtime
    finally:
        runtime.stop()


def _state(runtime):
    """Everything a load may change: the catalog, the voices, every value of the pool."""
    pool = runtime.engine.backend.model.lora
    return ([(e.name, e.slot, e.state, e.sessions) for e in runtime.catalog.entries()],
            runtime.voices, dict(runtime.adapters), list(pool.adapted),
            [float(t.double().abs().sum()) for layer in pool.a + pool.b for t in layer.values()])


def _refused(runtime, name, path, voices=()):
    before = _state(runtime)
    with pytest.raises(AdminError) as err:
        asyncio.run(_admin(runtime).load(name, str(path), list(voices)))
    assert _state(runtime) == before, "a refused load changed something"
    return err.value


def _broken(dirs, name, change):
    d = dirs.allowed / name
    if not d.exists():
        shutil.copytree(dirs.nova, d)
        (d / "voices.json").write_text(json.dumps({"voices": [name]}))
        change(d)
    return d


def _edit_config(d, **fields):
    raw = json.loads((d / "adapter_config.json").read_text())
    raw.update(fields)
    (d / "adapter_config.json").write_text(json.dumps(raw))


def _narrow(d):
    """One lora_A of another base model's width (32 inputs; the demo's q_proj has 64)."""
    t = load_file(str(d / "adapter_model.safetensors"))
    key = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
    t[key] = t[key][:, :32].clone()
    save_file(t, str(d / "adapter_model.safetensors"))


def test_paths_outside_the_adapter_dirs_are_refused_and_change_nothing(serving, dirs):
    (dirs.allowed / "escape").unlink(missing_ok=True)
    os.symlink(dirs.elsewhere / "outside", dirs.allowed / "escape")
    for path in (dirs.elsewhere / "outside",                      # plainly outside
                 f"{dirs.allowed}/../elsewhere/outside",          # `..` out of it
                 dirs.allowed / "escape"):                        # a symlink out of it
        err = _refused(serving, "stray", path)
        assert err.code == Status.PERMISSION_DENIED, (path, err.message)
        assert "outside model.adapter_dirs" in err.message and str(dirs.allowed) in err.message
    # the directory itself is judged where it resolves, before any file in it is looked at:
    # an empty directory outside is refused as outside, not read as a broken adapter
    (dirs.elsewhere / "empty").mkdir(exist_ok=True)
    (dirs.allowed / "escape-empty").unlink(missing_ok=True)
    os.symlink(dirs.elsewhere / "empty", dirs.allowed / "escape-empty")
    sibling = dirs.allowed.parent / f"{dirs.allowed.name}-evil"  # shares the name's prefix
    sibling.mkdir(exist_ok=True)
    for path in (dirs.allowed / "escape-empty", f"{dirs.allowed}/../elsewhere/empty", sibling):
        err = _refused(serving, "stray", path)
        assert err.code == Status.PERMISSION_DENIED, (path, err.message)
    # a file of the adapter that links out of the allowed directory is refused too
    linked = dirs.allowed / "linked"
    if not linked.exists():
        linked.mkdir()
        for f in ("adapter_config.json", "voices.json"):
            shutil.copy(dirs.nova / f, linked / f)
        (linked / "voices.json").write_text('{"voices": ["linked"]}')
        os.symlink(dirs.elsewhere / "outside" / "adapter_model.safetensors",
                   linked / "adapter_model.safetensors")
    err = _refused(serving, "linked", linked)
    assert err.code == Status.PERMISSION_DENIED and "adapter_model.safetensors" in err.message
    err = _refused(serving, "rel", "allowed/nova")
    assert err.code == Status.INVALID_ARGUMENT and "not absolute" in err.message
    err = _refused(serving, "../nova", dirs.nova)  # a name is a name, never a path
    assert err.code == Status.INVALID_ARGUMENT and "never a path" in err.message


def _wide(dirs, name):
    path = dirs.allowed / name
    if not path.exists():
        make_demo_adapter(path, voice=name, r=16, seed=5)
    return path


@pytest.mark.parametrize("name, make, words", [
    ("nofile", lambda dirs, n: _broken(dirs, n, lambda d: (d / "adapter_model.safetensors").unlink()),
     "adapter_model.safetensors is missing"),
    ("dora", lambda dirs, n: _broken(dirs, n, lambda d: _edit_config(d, use_dora=True)),
     "use_dora is True: DoRA"),
    ("newfield", lambda dirs, n: _broken(dirs, n, lambda d: _edit_config(d, lora_magic=3)),
     "lora_magic is set"),
    ("narrow", lambda dirs, n: _broken(dirs, n, _narrow),
     "q_proj.lora_A.weight has shape [8, 32], the base model needs [8, 64]"),
    ("wide", _wide, "r is 16, above this server's engine.max_lora_rank 8"),
])
def test_a_bad_adapter_directory_is_refused_naming_the_problem(serving, dirs, name, make, words):
    err = _refused(serving, name, make(dirs, name))
    assert err.code == Status.INVALID_ARGUMENT and words in err.message, err.message


def test_a_taken_name_or_voice_and_a_full_pool_are_refused(serving, dirs):
    err = _refused(serving, "nova-lora", dirs.allowed / "orion")
    assert err.code == Status.ALREADY_EXISTS and "'nova-lora' is already loaded" in err.message
    err = _refused(serving, "nova-two", dirs.nova)  # its voices.json says nova: taken
    assert err.code == Status.ALREADY_EXISTS and "'nova'" in err.message
    err = _refused(serving, "x", dirs.allowed / "orion", voices=["tara"])  # a base voice
    assert err.code == Status.ALREADY_EXISTS and "base model" in err.message
    admin = _admin(serving)
    orion = asyncio.run(admin.load("orion", str(dirs.allowed / "orion"), ["Orion:de"]))
    try:
        assert (orion.slot, orion.rank) == (1, 4)
        assert serving.voices.resolve("orion").language == "de"
        err = _refused(serving, "more", dirs.allowed / "wide")
        assert err.code == Status.RESOURCE_EXHAUSTED and "unload one first" in err.message
    finally:
        admin.unload("orion")
    assert serving.voices.resolve("orion") is None
    assert [e.name for e in serving.catalog.entries()] == ["nova-lora"]


def test_adapter_dirs_need_a_sized_pool_and_real_directories(tmp_path):
    from orpheus_svc.config import ConfigError

    sim = {"engine.backend": "sim", "model.adapter_dirs": [str(tmp_path)]}
    with pytest.raises(ConfigError, match="set both engine.max_adapters and "
                                          "engine.max_lora_rank above 0 \\(now 2 and 0\\)"):
        build_runtime(load_config(overrides={**sim, "engine.max_adapters": 2}, environ={}))
    with pytest.raises(ConfigError, match="model.adapter_dirs: .*/none is not a directory"):
        build_runtime(load_config(overrides={**sim, "engine.max_adapters": 2,
                                             "engine.max_lora_rank": 8,
                                             "model.adapter_dirs": [str(tmp_path / "none")]},
                                  environ={}))
    runtime = build_runtime(load_config(overrides={**sim, "engine.max_adapters": 2,
                                                   "engine.max_lora_rank": 8}, environ={}))
    assert (runtime.catalog.capacity, runtime.engine.capabilities.max_lora_rank) == (2, 8)
