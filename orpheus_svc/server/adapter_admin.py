"""Loading, listing and unloading LoRA adapters while the server serves, in domain terms: what
the admin service (server/admin.py, orpheus.admin.v1) answers. Runs on the asyncio loop, the
owner of the runtime's adapter catalog (core/adapters.py); no grpc here.

    load(name, path, voices)
      name a name (core/lora_config.py), the pool has room to ask for, model.adapter_dirs set
      path -> resolve_inside (models/adapters.py): realpath inside model.adapter_dirs
      catalog.reserve(name)          a free slot (ALREADY_EXISTS, RESOURCE_EXHAUSTED)
      read_adapter (a worker thread) the start-up checks (PEFT fields, shapes, rank)
      catalog.claim(name, voices)    no voice twice (ALREADY_EXISTS)
      engine.write_adapter(slot)     on the engine thread, between steps
      catalog.activate(name)         its voices listed: ListVoices, every edge
    unload(name)                     catalog.unload: draining; the slot frees after the
                                     last session (StreamSession releases its lease)

Every refusal is an AdminError with a core/status.py code and a message naming what is
wrong; a refused load changes nothing (the reserved slot is given back). The split
topology refuses every call (UNIMPLEMENTED): its engine runs in another process and each
front-end holds its own sessions, so no one process could count an adapter's sessions
(docs/lora.md).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Sequence

import structlog

from orpheus_svc.core.adapters import AdapterEntry, AdapterRefusal
from orpheus_svc.core.errors import internal_message, new_error_id
from orpheus_svc.core.lora_config import AdapterError, adapter_dirs, adapter_name_problem
from orpheus_svc.core.status import Status
from orpheus_svc.core.voices import VoiceRegistry, VoiceRegistryError, registry_from_setting
from orpheus_svc.models.adapters import AdapterPathError, read_adapter, resolve_inside

from .state import ServerState

log = structlog.get_logger("orpheus_svc.admin")

# How long a load waits for the engine thread to write the slot (it waits at most one step).
WRITE_TIMEOUT_S = 120.0

SPLIT_REFUSAL = ("the admin service is not available with server.topology split: the engine "
                 "runs in its own process and each front-end counts only its own sessions, so "
                 "adapters are fixed at start-up there (model.adapters; a rolling restart "
                 "changes them); use server.topology single to load adapters while serving")


class AdminError(Exception):
    """An admin call refused or failed: `code` a core/status.py Status, `message` for a
    person (names the adapter, path or setting at fault)."""

    def __init__(self, code: Status, message: str) -> None:
        super().__init__(message)
        self.code = Status(code)
        self.message = message


@dataclass(frozen=True)
class PoolListing:
    """ListAdapters' answer: the adapters by slot, the pool's size, the allowed directories."""

    adapters: list[AdapterEntry]
    capacity: int
    max_rank: int
    adapter_dirs: tuple[str, ...]


class AdapterAdmin:
    """The admin calls (module docstring) on `state`'s runtime. `split`: this process is a
    front-end of the split topology (every call refused)."""

    def __init__(self, state: ServerState, *, split: bool = False) -> None:
        self.state = state
        self.split = split

    def _runtime(self):
        if self.split:
            raise AdminError(Status.UNIMPLEMENTED, SPLIT_REFUSAL)
        runtime = self.state.runtime
        if runtime is None:
            raise AdminError(Status.UNAVAILABLE, "the model is still loading; retry shortly "
                                                 "(health reports SERVING when ready)")
        return runtime

    def _dirs(self) -> tuple[str, ...]:
        return adapter_dirs(self.state.config.model.adapter_dirs)

    # -- the calls -------------------------------------------------------------------------

    def listing(self) -> PoolListing:
        runtime = self._runtime()
        caps = runtime.engine.capabilities
        return PoolListing(runtime.catalog.entries(), runtime.catalog.capacity,
                           caps.max_lora_rank, self._dirs())

    async def load(self, name: str, path: str, voices: Sequence[str] = ()) -> AdapterEntry:
        """Adapter directory `path` into a free slot as `name` (module docstring); the
        entry as loaded. AdminError otherwise, with nothing changed."""
        runtime = self._runtime()
        catalog = runtime.catalog
        problem = adapter_name_problem(name)
        if problem is not None:
            raise AdminError(Status.INVALID_ARGUMENT, f"name: {problem}")
        dirs = self._dirs()
        if not dirs:
            raise AdminError(Status.FAILED_PRECONDITION, (
                "model.adapter_dirs is empty: this server loads no adapter while serving; "
                "name the directories adapters may come from in model.adapter_dirs"))
        given = _voices(name, voices)
        try:
            real = resolve_inside(path, dirs)
        except AdapterPathError as exc:
            code = Status.PERMISSION_DENIED if exc.outside else Status.INVALID_ARGUMENT
            raise AdminError(code, f"path: {exc}") from None
        try:
            entry = catalog.reserve(name, str(real))
        except AdapterRefusal as exc:
            raise AdminError(exc.code, exc.message) from None
        try:
            weights = await asyncio.get_running_loop().run_in_executor(
                None, lambda: read_adapter(real, runtime.lora_base,
                                           runtime.engine.capabilities.max_lora_rank,
                                           voices=given))
            catalog.claim(name, weights.voices, weights.spec.r)
            written = runtime.engine.write_adapter(entry.slot, weights)
            await asyncio.wait_for(asyncio.wrap_future(written), WRITE_TIMEOUT_S)
        except AdapterError as exc:
            catalog.abandon(name)
            raise AdminError(Status.INVALID_ARGUMENT, f"adapter {name!r}: {exc}") from None
        except AdapterRefusal as exc:
            catalog.abandon(name)
            raise AdminError(exc.code, f"adapter {name!r}: {exc.message}") from None
        except asyncio.TimeoutError:
            catalog.abandon(name)
            raise AdminError(Status.UNAVAILABLE, (
                f"adapter {name!r}: the engine did not write it within {WRITE_TIMEOUT_S:g} s "
                f"(is the engine stalled?); nothing was loaded")) from None
        except BaseException as exc:  # a bug, a dead engine, or the caller went away
            catalog.abandon(name)
            if isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt, SystemExit)):
                raise
            error_id = new_error_id()
            log.error("adapter load failed", adapter=name, error_id=error_id, exc_info=exc)
            raise AdminError(Status.INTERNAL, internal_message(
                f"adapter {name!r}: loading failed", error_id) + "; nothing was loaded") from None
        entry = catalog.activate(name)
        log.info("adapter loaded", adapter=entry.name, slot=entry.slot, path=entry.path,
                 rank=entry.rank, voices=entry.voice_names)
        return entry

    def unload(self, name: str) -> tuple[AdapterEntry, bool]:
        """Adapter `name` takes no new session from now on; its slot frees after its last
        session (at once with none open: the bool)."""
        runtime = self._runtime()
        try:
            entry, freed = runtime.catalog.unload(name)
        except AdapterRefusal as exc:
            raise AdminError(exc.code, exc.message) from None
        log.info("adapter unloaded", adapter=entry.name, slot=entry.slot,
                 open_sessions=entry.sessions, slot_freed=freed)
        return entry, freed


def _voices(name: str, voices: Sequence[str]) -> VoiceRegistry | None:
    """The voices a LoadAdapter call gave ("name" or "name:language" each), parsed here as
    names and never as a path; None: the adapter directory's voices.json."""
    items = [v.strip() for v in voices]
    if not items:
        return None
    if any(not v or "," in v for v in items):
        raise AdminError(Status.INVALID_ARGUMENT, (
            "voices: each entry is one voice, \"name\" or \"name:language\" (no commas, "
            "none empty)"))
    try:
        return registry_from_setting(", ".join(items), source=f"the voices given for {name!r}")
    except VoiceRegistryError as exc:
        raise AdminError(Status.INVALID_ARGUMENT, f"voices: {exc}") from None
