"""Which LoRA adapters are served, in which slot of the device pool, and who still uses them
(pure; owned by the asyncio loop, like the sessions that lease them).

The engine holds `engine.max_adapters` adapter slots on the device (engine/model/lora.py);
a GenerationRequest names its slot by index, -1 for the base model. This catalog decides
the indices:

    reserve(name)        LOADING     a free index, while the weights are read and installed
    activate(name, ...)  READY       its voices are listed and new sessions may use it
    lease(name)          +1 session  a session holds its adapter from start to end
    unload(name)         DRAINING    no new sessions; the name is free again at once (a
                                     reload may take it), the index only when the last
                                     session that leased it has ended
    release(lease)       -1 session  the last one of a draining adapter frees its index

So an index is never reused while a session could still send a row to it, and unloading
never cuts an open session short.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from .voices import VoiceRegistry, with_adapter_voices

LOADING, READY, DRAINING = "loading", "ready", "draining"


class AdapterCatalogError(ValueError):
    """A catalog request that cannot be met; `code` is a core/status.py name for the edge
    (ALREADY_EXISTS, NOT_FOUND, RESOURCE_EXHAUSTED, FAILED_PRECONDITION)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class AdapterEntry:
    """One adapter in the pool. `info`: what its loader read (rank, scaling, modules, ...),
    for listing; `voices`: the voices it speaks (set when it becomes READY)."""

    name: str
    index: int
    source: str
    state: str = LOADING
    sessions: int = 0
    voices: VoiceRegistry | None = None
    info: dict[str, Any] = field(default_factory=dict)
    serial: int = 0  # which load of that name this is (1, 2, ...), for logs and listings


class AdapterLease:
    """A session's hold on its adapter: `index` goes into every GenerationRequest of the
    session; `release()` once the session ends (idempotent)."""

    def __init__(self, catalog: "AdapterCatalog", entry: AdapterEntry) -> None:
        self._catalog, self.entry, self._held = catalog, entry, True

    @property
    def index(self) -> int:
        return self.entry.index

    def release(self) -> None:
        if self._held:
            self._held = False
            self._catalog._release(self.entry)


class AdapterCatalog:
    """The adapter pool's bookkeeping (module docstring). `capacity`: engine.max_adapters."""

    def __init__(self, capacity: int, base_voices: VoiceRegistry) -> None:
        self.capacity = capacity
        self.base_voices = base_voices
        self._by_name: dict[str, AdapterEntry] = {}   # LOADING and READY
        self._draining: list[AdapterEntry] = []
        self._serials = itertools.count(1)
        self.voices = base_voices  # base + READY adapters' voices (with_adapter_voices)

    # -- loading ------------------------------------------------------------------------

    def reserve(self, name: str, source: str) -> AdapterEntry:
        """A free index for adapter `name` (LOADING). AdapterCatalogError: the name is taken
        (ALREADY_EXISTS) or every index is in use (RESOURCE_EXHAUSTED)."""
        if name in self._by_name:
            raise AdapterCatalogError("ALREADY_EXISTS", f"adapter {name!r} is already "
                                      f"{self._by_name[name].state}; unload it first")
        used = {e.index for e in self._by_name.values()} | {e.index for e in self._draining}
        free = [i for i in range(self.capacity) if i not in used]
        if not free:
            draining = len(self._draining)
            raise AdapterCatalogError("RESOURCE_EXHAUSTED", (
                f"all {self.capacity} adapter slots are in use (engine.max_adapters)"
                + (f"; {draining} of them wait for their last sessions to end after an unload"
                   if draining else "; unload one first")))
        entry = AdapterEntry(name, free[0], source, serial=next(self._serials))
        self._by_name[name] = entry
        return entry

    def activate(self, name: str, voices: VoiceRegistry, info: dict[str, Any]) -> None:
        """The weights of `name` are on the device: list its voices and let sessions use it.
        VoiceRegistryError (and the entry stays LOADING) if a voice name is already taken."""
        entry = self._by_name[name]
        ready = [(e.name, e.voices) for e in self._by_name.values()
                 if e.state == READY and e.voices is not None]
        combined = with_adapter_voices(self.base_voices, ready + [(name, voices)])
        entry.voices, entry.info, entry.state = voices, dict(info), READY
        self.voices = combined

    def abandon(self, name: str) -> None:
        """A load of `name` failed after reserve(): its index is free again."""
        entry = self._by_name.get(name)
        if entry is not None and entry.state == LOADING:
            del self._by_name[name]

    # -- serving -------------------------------------------------------------------------

    def lease(self, name: str) -> AdapterLease:
        """Adapter `name` for one session (READY only). AdapterCatalogError(NOT_FOUND)."""
        entry = self._by_name.get(name)
        if entry is None or entry.state != READY:
            raise AdapterCatalogError("NOT_FOUND", f"adapter {name!r} is not loaded (it was "
                                      f"unloaded, or has not finished loading)")
        entry.sessions += 1
        return AdapterLease(self, entry)

    def _release(self, entry: AdapterEntry) -> None:
        entry.sessions -= 1
        if entry.state == DRAINING and entry.sessions <= 0 and entry in self._draining:
            self._draining.remove(entry)

    def unload(self, name: str) -> AdapterEntry:
        """Stop new sessions on `name`; its index frees once its sessions have ended (at
        once when none is open). AdapterCatalogError(NOT_FOUND) for an unknown name,
        FAILED_PRECONDITION while it is still loading."""
        entry = self._by_name.get(name)
        if entry is None:
            raise AdapterCatalogError("NOT_FOUND", f"no adapter named {name!r} is loaded")
        if entry.state == LOADING:
            raise AdapterCatalogError("FAILED_PRECONDITION",
                                      f"adapter {name!r} is still loading; unload it after")
        del self._by_name[name]
        entry.state = DRAINING
        if entry.sessions > 0:
            self._draining.append(entry)
        self._rebuild_voices()
        return entry

    def _rebuild_voices(self) -> None:
        self.voices = with_adapter_voices(
            self.base_voices, [(e.name, e.voices) for e in self._by_name.values()
                               if e.state == READY and e.voices is not None])

    # -- reading -------------------------------------------------------------------------

    def get(self, name: str) -> AdapterEntry | None:
        """The LOADING or READY entry called `name`."""
        return self._by_name.get(name)

    def entries(self) -> list[AdapterEntry]:
        """Every adapter that holds an index: loading, ready, then draining ones."""
        return list(self._by_name.values()) + list(self._draining)

    def index_in_use(self, index: int) -> bool:
        return any(e.index == index for e in self.entries())
