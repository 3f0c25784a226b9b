"""The reference voices' bookkeeping (core/reference_catalog.py) and the runtime's one
registration point (runtime.py FrontRuntime.add_reference_voice / remove_reference_voice):
a name held once across base, adapter and reference voices, a refused registration leaving
nothing, a session's lease keeping its voice past an unload, and the release after the last."""

import asyncio

import pytest

from orpheus_svc.config import Config
from orpheus_svc.core.reference import ReferenceVoice, build_reference_prompt, reference_prefix
from orpheus_svc.core.reference_catalog import (
    DRAINING,
    LOADED,
    LOADING,
    ReferenceCatalog,
    ReferenceRefusal,
)
from orpheus_svc.core.adapters import AdapterRefusal
from orpheus_svc.core.status import Status
from orpheus_svc.core.tokens import frames_to_token_ids
from orpheus_svc.core.voices import english_registry, registry_from_setting
from orpheus_svc.engine.handle import EventRouter
from orpheus_svc.runtime import FrontRuntime


def ref(name="clone", frames=20, code=1, transcript="Words the clip says."):
    return ReferenceVoice(name, transcript, tuple(frames_to_token_ids([[code] * 7] * frames)))


def encode(text):
    return [128000, *(1000 + ord(c) for c in text)]


class Caps:
    max_seq_len = 4096


class Engine:
    capabilities = Caps()


def runtime(**kw):
    return FrontRuntime(config=Config(), engine=Engine(), router=EventRouter(), encode=encode,
                        model_name="test", is_demo=True, device="cpu", **kw)


def test_a_voice_is_listed_only_once_active_and_a_failed_load_leaves_nothing():
    changes, freed = [], []
    catalog = ReferenceCatalog(on_free=freed.append, on_change=lambda: changes.append(1))
    entry = catalog.reserve(ref("Ann"))
    assert entry.state == LOADING and catalog.references == {} and not changes
    with pytest.raises(ReferenceRefusal) as err:
        catalog.reserve(ref("ann"))  # held while it loads, in any case
    assert err.value.code == Status.ALREADY_EXISTS and err.value.field == "name"
    catalog.abandon("ann")
    assert catalog.entries() == [] and catalog.holder("Ann") is None and not freed
    catalog.reserve(ref("Ann"))
    assert catalog.activate("ann").state == LOADED
    assert list(catalog.references) == ["ann"] and changes == [1]


def test_a_lease_keeps_its_voice_through_an_unload_and_the_last_release_frees_it():
    freed = []
    catalog = ReferenceCatalog(on_free=freed.append)
    old = ref("ann", code=1)
    catalog.add(old)
    lease = catalog.lease("ANN")
    assert (lease.slot, lease.reference, catalog.entries()[0].sessions) == (-1, old, 1)
    entry, gone = catalog.unload("Ann")
    assert (entry.state, gone, catalog.references) == (DRAINING, False, {})
    with pytest.raises(ReferenceRefusal) as err:
        catalog.lease("ann")
    assert err.value.code == Status.FAILED_PRECONDITION and "being unloaded" in err.value.message
    with pytest.raises(ReferenceRefusal) as err:
        catalog.unload("ann")
    assert err.value.code == Status.NOT_FOUND and "already being unloaded" in err.value.message
    new = ref("ann", code=2)
    catalog.add(new)  # the name may be loaded again while the old one drains
    assert catalog.lease("ann").reference == new and catalog.refusal("ann") is None
    assert lease.reference == old and not freed
    lease.release()
    lease.release()  # idempotent
    assert freed == [old] and [e.voice for e in catalog.entries()] == [new]


def test_unloading_a_voice_no_session_holds_frees_it_at_once():
    freed = []
    catalog = ReferenceCatalog(on_free=freed.append)
    catalog.add(ref("ann"))
    assert catalog.unload("ann")[1] is True and len(freed) == 1
    with pytest.raises(ReferenceRefusal) as err:
        catalog.unload("bob")
    assert err.value.code == Status.NOT_FOUND
    catalog.reserve(ref("bob"))
    with pytest.raises(ReferenceRefusal) as err:
        catalog.unload("bob")
    assert err.value.code == Status.FAILED_PRECONDITION and "still loading" in err.value.message


def test_the_runtime_registers_through_one_point_and_lists_the_voice():
    rt = runtime(voices=english_registry())
    before = rt.voices
    entry = asyncio.run(rt.add_reference_voice(ref("Clone"), "/clips/c.wav"))
    assert (entry.state, entry.clip, entry.prefix_tokens) == \
        (LOADED, "/clips/c.wav", len(reference_prefix(encode, ref("Clone"))))
    assert rt.voices.resolve("clone").reference and rt.voices.names[:-1] == before.names
    assert rt.prompt("clone", "Hi.") == build_reference_prompt(encode, ref("Clone"), "Hi.")
    assert rt.remove_reference_voice("CLONE")[1] is True
    assert rt.voices == before and rt.references == {}
    assert rt.prompt("clone", "Hi.") != build_reference_prompt(encode, ref("Clone"), "Hi.")


@pytest.mark.parametrize("name, owner", [("Tara", "a voice of the base model"),
                                         ("NOVA", "a voice of adapter 'nova-lora'"),
                                         ("start", "a reference voice")])
def test_a_taken_name_is_refused_and_nothing_changes(name, owner):
    rt = runtime(voices=english_registry(), references={"start": ref("start")})
    rt.catalog.capacity = 1
    rt.catalog.reserve("nova-lora")
    rt.catalog.claim("nova-lora", registry_from_setting("nova"))  # loading: its voice held
    voices, references = rt.voices, dict(rt.references)
    with pytest.raises(ReferenceRefusal) as err:
        asyncio.run(rt.add_reference_voice(ref(name)))
    assert err.value.code == Status.ALREADY_EXISTS and err.value.field == "name"
    assert owner in err.value.message
    assert rt.voices == voices and rt.references == references
    assert [e.name for e in rt.reference_catalog.entries()] == ["start"]


def test_an_adapter_may_not_claim_a_reference_voice_name_even_one_loading():
    rt = runtime(voices=english_registry())
    rt.catalog.capacity = 2
    rt.reference_catalog.reserve(ref("kai"))  # a reference voice loading, not listed yet
    rt.catalog.reserve("kai-lora")
    with pytest.raises(AdapterRefusal) as err:
        rt.catalog.claim("kai-lora", registry_from_setting("Kai"))
    assert err.value.code == Status.ALREADY_EXISTS and "a reference voice" in err.value.message


def test_a_prefix_that_leaves_no_room_in_a_slot_is_refused_unregistered():
    rt = runtime(voices=english_registry())
    Caps.max_seq_len = 200
    try:
        with pytest.raises(ReferenceRefusal) as err:
            asyncio.run(rt.add_reference_voice(ref("long", frames=30)))
    finally:
        Caps.max_seq_len = 4096
    assert err.value.code == Status.INVALID_ARGUMENT and err.value.field == "clip"
    assert rt.reference_catalog.entries() == [] and rt.voices.resolve("long") is None


def test_a_refusal_at_the_engine_hook_leaves_nothing_registered(monkeypatch):
    """The seam a prefix pool fills (`_hold_reference`): its RESOURCE_EXHAUSTED reaches the
    caller, and the name is free again."""
    async def full(self, r):
        raise ReferenceRefusal(Status.RESOURCE_EXHAUSTED, "the prefix pool is full")

    monkeypatch.setattr(FrontRuntime, "_hold_reference", full)
    rt = runtime(voices=english_registry())
    with pytest.raises(ReferenceRefusal) as err:
        asyncio.run(rt.add_reference_voice(ref("ann")))
    assert err.value.code == Status.RESOURCE_EXHAUSTED
    assert rt.reference_catalog.entries() == [] and rt.voice_owner("ann") is None
    released = []
    monkeypatch.setattr(FrontRuntime, "_hold_reference", lambda self, r: asyncio.sleep(0))
    monkeypatch.setattr(FrontRuntime, "_release_reference", lambda self, r: released.append(r))
    rt = runtime(voices=english_registry())
    asyncio.run(rt.add_reference_voice(ref("ann")))
    lease = rt.lease_voice("ann")
    rt.remove_reference_voice("ann")
    assert released == []
    lease.release()
    assert released == [ref("ann")]
