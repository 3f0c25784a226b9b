"""The adapter catalog (core/adapters.py): which adapter holds which pool slot, whose voices
are listed, and that an unloaded adapter's slot is freed only when its last session ends."""

import pytest

from orpheus_svc.core.adapters import (DRAINING, LOADED, LOADING, AdapterCatalog,
                                       AdapterRefusal)
from orpheus_svc.core.status import Status
from orpheus_svc.core.voices import english_registry, registry_from_setting


def voices(spec: str):
    return registry_from_setting(spec, source="test")


def catalog(capacity=2):
    freed = []
    cat = AdapterCatalog(english_registry(), capacity, on_free=freed.append)
    return cat, freed


def load(cat, name, spec, rank=8):
    cat.reserve(name, f"/adapters/{name}")
    cat.claim(name, voices(spec), rank)
    return cat.activate(name)


def test_a_loaded_adapter_lists_its_voices_and_leases_its_slot():
    cat, freed = catalog()
    entry = load(cat, "nova-lora", "nova")
    assert (entry.slot, entry.state, entry.rank) == (0, LOADED, 8)
    assert cat.voices.resolve("Nova").adapter == "nova-lora" and cat.slots == {"nova-lora": 0}
    assert cat.lease("tara") is None  # base voices hold nothing
    lease = cat.lease("NOVA")
    assert lease.slot == 0 and entry.sessions == 1
    lease.release()
    lease.release()  # idempotent
    assert entry.sessions == 0 and freed == []


def test_the_slot_is_freed_only_after_the_last_session_ends():
    cat, freed = catalog(capacity=1)
    load(cat, "a", "nova")
    first, second = cat.lease("nova"), cat.lease("nova")
    entry, now = cat.unload("a")
    assert not now and entry.state == DRAINING and entry.sessions == 2
    # unlisted at once, and refused by name with the adapter named
    assert cat.voices.resolve("nova") is None and cat.slots == {}
    assert "adapter 'a', which is being unloaded (draining: 2 session(s)" in cat.refusal("nova")
    with pytest.raises(AdapterRefusal) as err:
        cat.lease("nova")
    assert err.value.code == Status.FAILED_PRECONDITION
    # the slot is still held: a new adapter cannot have it yet
    with pytest.raises(AdapterRefusal) as full:
        cat.reserve("b")
    assert full.value.code == Status.RESOURCE_EXHAUSTED and "'a' with 2 open" in full.value.message
    first.release()
    assert freed == [] and [e.name for e in cat.entries()] == ["a"]
    second.release()
    assert freed == [0] and cat.entries() == [] and cat.refusal("nova") is None
    assert load(cat, "b", "orion").slot == 0  # the freed slot is reused


def test_unloading_an_idle_adapter_frees_its_slot_at_once():
    cat, freed = catalog()
    load(cat, "a", "nova")
    entry, now = cat.unload("a")
    assert now and freed == [0] and cat.entries() == []


def test_a_name_may_be_loaded_again_while_its_old_load_drains():
    cat, freed = catalog(capacity=2)
    load(cat, "a", "nova")
    old = cat.lease("nova")
    cat.unload("a")
    again = load(cat, "a", "nova")  # the new load speaks nova from now on
    assert again.slot == 1 and cat.lease("nova").slot == 1 and cat.refusal("nova") is None
    old.release()
    assert freed == [0] and [(e.slot, e.state) for e in cat.entries()] == [(1, LOADED)]


def test_loading_refusals_name_the_problem_and_change_nothing():
    cat, freed = catalog(capacity=2)
    load(cat, "a", "nova")
    before = (cat.voices, dict(cat.slots), [(e.name, e.slot, e.state) for e in cat.entries()])
    with pytest.raises(AdapterRefusal) as dup:
        cat.reserve("A")
    assert dup.value.code == Status.ALREADY_EXISTS and "already loaded" in dup.value.message
    cat.reserve("b")
    with pytest.raises(AdapterRefusal) as clash:
        cat.claim("b", voices("Nova"))
    assert clash.value.code == Status.ALREADY_EXISTS and "'Nova'" in clash.value.message
    with pytest.raises(AdapterRefusal, match="already a voice of the base model"):
        cat.claim("b", voices("tara"))
    with pytest.raises(AdapterRefusal) as loading:
        cat.unload("b")
    assert loading.value.code == Status.FAILED_PRECONDITION
    cat.abandon("b")
    after = (cat.voices, dict(cat.slots), [(e.name, e.slot, e.state) for e in cat.entries()])
    assert after == before and freed == []
    with pytest.raises(AdapterRefusal) as missing:
        cat.unload("nope")
    assert missing.value.code == Status.NOT_FOUND and "(loaded: a)" in missing.value.message


def test_a_loading_adapters_voices_are_not_listed_until_it_is_active():
    cat, _ = catalog()
    entry = cat.reserve("a")
    cat.claim("a", voices("nova"))
    assert entry.state == LOADING and cat.voices.resolve("nova") is None
    assert cat.lease("nova") is None  # not yet a voice at all
    cat.activate("a")
    assert cat.voices.resolve("nova").adapter == "a"


def test_no_pool_refuses_every_load():
    cat, _ = catalog(capacity=0)
    with pytest.raises(AdapterRefusal) as err:
        cat.reserve("a")
    assert err.value.code == Status.FAILED_PRECONDITION and "engine.max_adapters" in err.value.message


def test_the_start_up_adapters_come_from_the_runtimes_voice_list():
    from orpheus_svc.core.voices import with_adapter_voices

    combined = with_adapter_voices(english_registry(), [("a", voices("nova")),
                                                         ("b", voices("orion, lyra"))])
    cat = AdapterCatalog.from_registry(combined, {"a": 0, "b": 1})
    assert cat.voices == combined and cat.slots == {"a": 0, "b": 1}
    assert cat.slot_of("lyra") == 1 and cat.slot_of("tara") == -1
    assert [e.voice_names for e in cat.entries()] == [["nova"], ["orion", "lyra"]]
