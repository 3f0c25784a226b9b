"""Which LoRA adapters hold which slot of the engine's adapter pool, which voices they speak,
and how many sessions run on each (pure; owned by the asyncio loop, like the sessions that
lease them and the admin calls that load and unload them: docs/lora.md).

The engine holds `engine.max_adapters` slots on the device (engine/model/lora.py); a
GenerationRequest names its slot by index, -1 for the base model. This catalog decides the
indices and keeps an index out of reuse while a session may still send a row to it:

    reserve(name, path)    LOADING    a free slot, taken before the weights are read
    claim(name, voices)    LOADING    its voices, checked against every other live voice
    activate(name)         LOADED     its voices are listed; new sessions may lease it
    abandon(name)          -          a load that failed: its slot is free again, nothing else moved
    lease(voice)           +1 session a session holds its voice's adapter from start to end
    unload(name)           DRAINING   no new sessions from now on (the voices are unlisted
                                      and refused by name); the name may be loaded again at once
    lease.release()        -1 session the last one of a draining adapter frees its slot

A slot is free only when no entry holds it: loading, loaded or draining with sessions open.
`on_free(slot)` tells the owner when a slot that held weights is free again (the runtime
clears it on the engine), and `on_change()` when the published `voices` / `slots` changed.

`base` is the base model's voices with the loaded reference voices (core/reference.py
with_reference_voices; replaced by `set_base` when one is loaded or unloaded, and
`held_elsewhere` names a voice name a reference voice still loading holds).
`voices` (`base`, then each loaded adapter's voices, as core/voices.py
`with_adapter_voices` makes them) and `slots` (name -> slot of each loaded adapter) are
immutable snapshots, replaced as a whole: any thread may read the latest.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Mapping

from .lease import Lease
from .status import Status
from .voices import VoiceRegistry, VoiceRegistryError, with_adapter_voices

LOADING, LOADED, DRAINING = "loading", "loaded", "draining"


class AdapterRefusal(Exception):
    """A catalog request that cannot be met, with the status the edge answers (`code`) and a
    message naming the adapter or voice and what to do."""

    def __init__(self, code: Status, message: str) -> None:
        super().__init__(message)
        self.code = Status(code)
        self.message = message


@dataclass
class AdapterEntry:
    """One adapter that holds a pool slot. `path`, `rank`: where it was read from and its
    LoRA rank (for listings); `voices`: what it speaks (set by claim)."""

    name: str
    slot: int
    path: str = ""
    rank: int = 0
    voices: VoiceRegistry | None = None
    state: str = LOADING
    sessions: int = 0

    @property
    def voice_names(self) -> list[str]:
        return self.voices.names if self.voices is not None else []


class AdapterLease(Lease):
    """A session's hold on the adapter that speaks its voice: `slot` goes into every
    GenerationRequest of the session; `release()` once the session ended (idempotent).
    `reference` is None: an adapter's voice is no reference voice (a session reads both
    from whichever lease it holds: core/reference_catalog.py ReferenceLease)."""

    reference = None

    @property
    def slot(self) -> int:
        return self.entry.slot


def _key(name: str) -> str:
    return name.strip().casefold()


class AdapterCatalog:
    """The adapter pool's bookkeeping (module docstring). `capacity`: the engine's slots
    (engine.max_adapters; 0: no pool, every load refused)."""

    def __init__(self, base: VoiceRegistry, capacity: int, *,
                 on_free: Callable[[int], None] | None = None,
                 on_change: Callable[[], None] | None = None) -> None:
        self.base = base
        self.capacity = capacity
        self.on_free = on_free
        self.on_change = on_change
        # name -> who holds it outside this catalog's voices (a reference voice loading), or
        # None: a voice an adapter claims may not take such a name either
        self.held_elsewhere: Callable[[str], str | None] | None = None
        self._live: dict[str, AdapterEntry] = {}   # LOADING and LOADED, by casefolded name
        self._draining: list[AdapterEntry] = []    # unloaded, sessions still open
        self.voices: VoiceRegistry = base
        self.slots: Mapping[str, int] = {}

    @classmethod
    def from_registry(cls, voices: VoiceRegistry, slots: Mapping[str, int],
                      capacity: int | None = None) -> "AdapterCatalog":
        """The catalog of adapters served from start-up: `voices` as with_adapter_voices
        made them (each adapter voice tagged), `slots` each adapter's slot."""
        base = VoiceRegistry(tuple(v for v in voices.voices if v.adapter is None),
                             voices.default, voices.source)
        catalog = cls(base, len(slots) if capacity is None else capacity)
        for name, slot in sorted(slots.items(), key=lambda item: item[1]):
            own = tuple(dataclasses.replace(v, adapter=None) for v in voices.voices
                        if v.adapter == name)
            catalog.add(name, slot, VoiceRegistry(own, own[0].name, f"adapter {name}"))
        return catalog

    # -- start-up --------------------------------------------------------------------------

    def add(self, name: str, slot: int, voices: VoiceRegistry, path: str = "",
            rank: int = 0) -> AdapterEntry:
        """An adapter already in `slot` (model.adapters, installed at start-up): LOADED.
        ValueError for a slot outside the pool or taken; VoiceRegistryError for a voice
        another adapter or the base model has."""
        if not 0 <= slot < self.capacity or slot in self._used():
            raise ValueError(f"adapter {name!r}: slot {slot} is outside the pool or taken")
        entry = AdapterEntry(name, slot, path, rank)
        self._check_voices(entry, voices)
        entry.voices, entry.state = voices, LOADED
        self._live[_key(name)] = entry
        self._publish()
        return entry

    def set_base(self, base: VoiceRegistry) -> None:
        """The base model's voices are now `base` (a reference voice loaded or unloaded:
        runtime.py); the published voice list follows. The caller has checked that no name
        in `base` is an adapter's voice (owner_of)."""
        self.base = base
        self._publish()

    def owner_of(self, name: str) -> str | None:
        """Which live voice has `name` (any case), for a refusal: "a voice of the base
        model", "a reference voice", or "a voice of adapter 'x'" (loading or loaded); None
        when no voice does."""
        key = _key(name or "")
        for v in self.base.voices:
            if v.name.casefold() == key:
                return "a reference voice" if v.reference else "a voice of the base model"
        for entry in self._live.values():
            if entry.voices is not None and key in {n.casefold() for n in entry.voice_names}:
                return f"a voice of adapter {entry.name!r}"
        return None

    # -- loading ---------------------------------------------------------------------------

    def reserve(self, name: str, path: str = "") -> AdapterEntry:
        """A free slot for adapter `name`, held while it loads (LOADING). AdapterRefusal:
        no pool (FAILED_PRECONDITION), the name is loaded or loading (ALREADY_EXISTS), every
        slot is held (RESOURCE_EXHAUSTED, saying how many wait for their sessions)."""
        if self.capacity < 1:
            raise AdapterRefusal(Status.FAILED_PRECONDITION, (
                "this server has no adapter pool (engine.max_adapters is 0): set "
                "engine.max_adapters and engine.max_lora_rank to load adapters while serving"))
        found = self._live.get(_key(name))
        if found is not None:
            raise AdapterRefusal(Status.ALREADY_EXISTS, (
                f"adapter {found.name!r} is already {found.state} (slot {found.slot}); unload "
                f"it first to load it again"))
        free = [s for s in range(self.capacity) if s not in self._used()]
        if not free:
            waiting = self._draining
            detail = (f"; {len(waiting)} of them belong to unloaded adapters that wait for "
                      f"their last sessions to end ({', '.join(_who(e) for e in waiting)})"
                      if waiting else "; unload one first")
            raise AdapterRefusal(Status.RESOURCE_EXHAUSTED, (
                f"every one of the {self.capacity} adapter slots is in use "
                f"(engine.max_adapters){detail}"))
        entry = AdapterEntry(name, free[0], path)
        self._live[_key(name)] = entry
        return entry

    def claim(self, name: str, voices: VoiceRegistry, rank: int = 0) -> AdapterEntry:
        """The voices loading adapter `name` will speak. AdapterRefusal(ALREADY_EXISTS) when
        one is a voice of the base model or of another live adapter (loading or loaded): a
        voice name alone must say which weights speak it. A draining adapter's voice may be
        taken: the new adapter speaks it from its activation on."""
        entry = self._loading(name)
        self._check_voices(entry, voices)
        entry.voices, entry.rank = voices, rank
        return entry

    def activate(self, name: str) -> AdapterEntry:
        """Loading adapter `name` is on the device: LOADED, its voices listed."""
        entry = self._loading(name)
        if entry.voices is None:
            raise ValueError(f"adapter {name!r}: claim its voices before activating it")
        entry.state = LOADED
        self._publish()
        return entry

    def abandon(self, name: str) -> None:
        """A load of `name` failed: its slot is free again; nothing else changed."""
        entry = self._live.get(_key(name))
        if entry is not None and entry.state == LOADING:
            del self._live[_key(name)]

    # -- serving ---------------------------------------------------------------------------

    def lease(self, voice: str) -> AdapterLease | None:
        """The adapter that speaks `voice`, held for one session; None for a voice of the
        base model (or a name no voice has: the edge refused it already).
        AdapterRefusal(FAILED_PRECONDITION) for a voice of an adapter being unloaded."""
        found = self.voices.resolve(voice)
        if found is None or found.adapter is None:
            refusal = self.refusal(voice) if found is None else None
            if refusal is not None:
                raise AdapterRefusal(Status.FAILED_PRECONDITION, refusal)
            return None
        entry = self._live[_key(found.adapter)]
        entry.sessions += 1
        return AdapterLease(self, entry)

    def refusal(self, voice: str) -> str | None:
        """Why `voice` takes no new session when it is the voice of an adapter being
        unloaded (draining) and no loaded adapter speaks it; None otherwise."""
        if self.voices.resolve(voice) is not None:
            return None
        key = _key(voice or "")
        for entry in reversed(self._draining):
            if entry.voices is not None and key in {v.casefold() for v in entry.voice_names}:
                return (f"voice {voice.strip()[:60]!r} is spoken by adapter {entry.name!r}, "
                        f"which is being unloaded (draining: {entry.sessions} session(s) "
                        f"still open); it takes no new sessions")
        return None

    def slot_of(self, voice: str) -> int:
        """The slot of the loaded adapter that speaks `voice`; -1 for the base model's."""
        found = self.voices.resolve(voice)
        return -1 if found is None or found.adapter is None else self.slots[found.adapter]

    def _release(self, entry: AdapterEntry) -> None:
        entry.sessions -= 1
        if entry.state == DRAINING and entry.sessions <= 0 and entry in self._draining:
            self._draining.remove(entry)
            self._freed(entry.slot)

    # -- unloading -------------------------------------------------------------------------

    def unload(self, name: str) -> tuple[AdapterEntry, bool]:
        """Stop new sessions on adapter `name` (DRAINING, its voices unlisted at once).
        Returns the entry and whether its slot is free already (no session was open); else
        it frees when the last one ends. AdapterRefusal: NOT_FOUND for a name no loaded
        adapter has, FAILED_PRECONDITION while it still loads."""
        entry = self._live.get(_key(name))
        if entry is None:
            draining = any(_key(e.name) == _key(name) for e in self._draining)
            raise AdapterRefusal(Status.NOT_FOUND, (
                f"adapter {name.strip()[:64]!r} is already being unloaded" if draining
                else f"no adapter named {name.strip()[:64]!r} is loaded"
                     + (f" (loaded: {', '.join(sorted(self.slots))})" if self.slots else "")))
        if entry.state == LOADING:
            raise AdapterRefusal(Status.FAILED_PRECONDITION,
                                 f"adapter {entry.name!r} is still loading; unload it after")
        del self._live[_key(name)]
        entry.state = DRAINING
        freed = entry.sessions <= 0
        if not freed:
            self._draining.append(entry)
        self._publish()
        if freed:
            self._freed(entry.slot)
        return entry, freed

    # -- reading ---------------------------------------------------------------------------

    def entries(self) -> list[AdapterEntry]:
        """Every adapter that holds a slot (loading, loaded, draining), by slot."""
        return sorted(list(self._live.values()) + self._draining, key=lambda e: e.slot)

    def get(self, name: str) -> AdapterEntry | None:
        """The loading or loaded adapter called `name` (any case)."""
        return self._live.get(_key(name))

    # -- inside ----------------------------------------------------------------------------

    def _used(self) -> set[int]:
        return {e.slot for e in self._live.values()} | {e.slot for e in self._draining}

    def _loading(self, name: str) -> AdapterEntry:
        entry = self._live.get(_key(name))
        if entry is None or entry.state != LOADING:
            raise ValueError(f"adapter {name!r} is not loading")
        return entry

    def _check_voices(self, entry: AdapterEntry, voices: VoiceRegistry) -> None:
        if self.held_elsewhere is not None:
            for name in voices.names:
                holder = self.held_elsewhere(name)
                if holder is not None:
                    raise AdapterRefusal(Status.ALREADY_EXISTS, (
                        f"adapter {entry.name!r}: voice {name!r} is already {holder}"))
        others = [(e.name, e.voices) for e in self._live.values()
                  if e is not entry and e.voices is not None]
        try:
            with_adapter_voices(self.base, others + [(entry.name, voices)])
        except VoiceRegistryError as exc:
            raise AdapterRefusal(Status.ALREADY_EXISTS, str(exc)) from None

    def _publish(self) -> None:
        loaded = sorted((e for e in self._live.values() if e.state == LOADED),
                        key=lambda e: e.slot)
        self.voices = with_adapter_voices(self.base, [(e.name, e.voices) for e in loaded])
        self.slots = {e.name: e.slot for e in loaded}
        if self.on_change is not None:
            self.on_change()

    def _freed(self, slot: int) -> None:
        if self.on_free is not None:
            self.on_free(slot)


def _who(entry: AdapterEntry) -> str:
    return f"{entry.name!r} with {entry.sessions} open"
