"""Which reference voices are registered, which take new sessions, and how many sessions run
on each (pure; owned by the asyncio loop, like the sessions that lease them and the admin
calls that load and unload them: docs/voices.md, "Loading and unloading while serving").

    add(ref)             LOADED      a voice of model.reference_voices, at start-up
    reserve(ref)         LOADING     a load while serving: the name is held, not listed yet
    activate(name)       LOADED      listed; new sessions may lease it
    abandon(name)        -           a load that failed: nothing of it is left
    lease(voice)         +1 session  a session holds its voice from its start to its end, so
                                     every segment's prompt is this voice's, even after an unload
    unload(name)         DRAINING    no new sessions from now on (unlisted, refused by name);
                                     the name may be loaded again at once
    lease.release()      -1 session  the last one of a draining voice lets it go

`on_free(ref)` tells the owner when a voice that was LOADED is held by nothing any more
(unloaded, its last session ended): the runtime releases what it keeps for it there
(runtime.py `_release_reference`). `on_change()`: the published `references` changed.

Whether a name is free among the base model's and the adapters' voices is the runtime's
question (runtime.py `voice_owner`); this catalog refuses a name another reference voice
holds (loading or loaded), in any case. `references` (casefolded name -> ReferenceVoice of
each LOADED voice, in load order) is an immutable snapshot replaced as a whole: any thread
may read the latest.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Mapping

from .reference import ReferenceVoice
from .lease import Lease
from .status import Status

LOADING, LOADED, DRAINING = "loading", "loaded", "draining"


class ReferenceRefusal(Exception):
    """A reference voice registration, unload or lease that cannot be made: `code` the
    status the edge answers, `message` naming the voice and what to do, `field` the request
    field at fault (None: the call as a whole)."""

    def __init__(self, code: Status, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.code = Status(code)
        self.message = message
        self.field = field


@dataclass
class ReferenceEntry:
    """One registered reference voice: `clip` the file it was read from ("" for bytes or
    start-up), `prefix_tokens` its prompt prefix's length (core/reference.py
    reference_prefix), `order` its place in listings."""

    voice: ReferenceVoice
    clip: str = ""
    prefix_tokens: int = 0
    state: str = LOADING
    sessions: int = 0
    order: int = 0

    @property
    def name(self) -> str:
        return self.voice.name


class ReferenceLease(Lease):
    """A session's hold on its reference voice: `reference` builds every prompt of the
    session; `slot` is the base model's (-1), as an AdapterLease's slot would be;
    `release()` once the session ended (idempotent)."""

    slot = -1

    @property
    def reference(self) -> ReferenceVoice:
        return self.entry.voice


def _key(name: str) -> str:
    return (name or "").strip().casefold()


class ReferenceCatalog:
    """The reference voices' bookkeeping (module docstring)."""

    def __init__(self, *, on_free: Callable[[ReferenceVoice], None] | None = None,
                 on_change: Callable[[], None] | None = None) -> None:
        self.on_free = on_free
        self.on_change = on_change
        self._live: dict[str, ReferenceEntry] = {}   # LOADING and LOADED, by casefolded name
        self._draining: list[ReferenceEntry] = []    # unloaded, sessions still open
        self._order = itertools.count()
        self.references: Mapping[str, ReferenceVoice] = {}

    # -- registering -----------------------------------------------------------------------

    def add(self, ref: ReferenceVoice, clip: str = "", prefix_tokens: int = 0) -> ReferenceEntry:
        """A voice served from start-up: LOADED at once."""
        entry = self.reserve(ref, clip, prefix_tokens)
        return self.activate(entry.name)

    def reserve(self, ref: ReferenceVoice, clip: str = "", prefix_tokens: int = 0
                ) -> ReferenceEntry:
        """Hold `ref`'s name while it is being registered (LOADING, not listed).
        ReferenceRefusal(ALREADY_EXISTS, field "name") when another reference voice, loading
        or loaded, has that name in any case."""
        found = self._live.get(_key(ref.name))
        if found is not None:
            raise ReferenceRefusal(Status.ALREADY_EXISTS, (
                f"{ref.name!r} is already a reference voice ({found.name!r}, {found.state}); "
                f"unload it first, or name this one differently"), field="name")
        entry = ReferenceEntry(ref, clip, prefix_tokens, LOADING, 0, next(self._order))
        self._live[_key(ref.name)] = entry
        return entry

    def activate(self, name: str) -> ReferenceEntry:
        """Loading voice `name` is ready: LOADED, listed."""
        entry = self._live.get(_key(name))
        if entry is None or entry.state != LOADING:
            raise ValueError(f"reference voice {name!r} is not loading")
        entry.state = LOADED
        self._publish()
        return entry

    def abandon(self, name: str) -> None:
        """A load of `name` failed: its name is free again; nothing else changed."""
        entry = self._live.get(_key(name))
        if entry is not None and entry.state == LOADING:
            del self._live[_key(name)]

    def holder(self, name: str) -> str | None:
        """How to name the reference voice that holds `name` (loading or loaded), for a
        refusal; None when none does."""
        entry = self._live.get(_key(name))
        if entry is None:
            return None
        return f"a reference voice ({entry.state})" if entry.state == LOADING \
            else "a reference voice"

    # -- serving ---------------------------------------------------------------------------

    def lease(self, voice: str) -> ReferenceLease | None:
        """The loaded reference voice `voice`, held for one session; None when `voice` is
        no reference voice. ReferenceRefusal(FAILED_PRECONDITION, field "voice") for one
        being unloaded."""
        entry = self._live.get(_key(voice))
        if entry is None or entry.state != LOADED:
            refusal = self.refusal(voice)
            if refusal is not None:
                raise ReferenceRefusal(Status.FAILED_PRECONDITION, refusal, field="voice")
            return None
        entry.sessions += 1
        return ReferenceLease(self, entry)

    def refusal(self, voice: str) -> str | None:
        """Why `voice` takes no new session when it is a reference voice being unloaded
        (draining) and no loaded one has its name; None otherwise."""
        key = _key(voice)
        found = self._live.get(key)
        if found is not None and found.state == LOADED:
            return None
        for entry in reversed(self._draining):
            if _key(entry.name) == key:
                return (f"voice {entry.name!r} is a reference voice being unloaded (draining: "
                        f"{entry.sessions} session(s) still open); it takes no new sessions")
        return None

    def _release(self, entry: ReferenceEntry) -> None:
        entry.sessions -= 1
        if entry.state == DRAINING and entry.sessions <= 0 and entry in self._draining:
            self._draining.remove(entry)
            self._freed(entry)

    # -- unloading -------------------------------------------------------------------------

    def unload(self, name: str) -> tuple[ReferenceEntry, bool]:
        """Stop new sessions on reference voice `name` (DRAINING, unlisted at once). Returns
        the entry and whether it is let go already (no session was open); else when the last
        one ends. ReferenceRefusal: NOT_FOUND for a name no loaded reference voice has,
        FAILED_PRECONDITION while it still loads."""
        entry = self._live.get(_key(name))
        if entry is None:
            draining = any(_key(e.name) == _key(name) for e in self._draining)
            loaded = [e.name for e in self._sorted(self._live.values()) if e.state == LOADED]
            raise ReferenceRefusal(Status.NOT_FOUND, (
                f"reference voice {(name or '').strip()[:64]!r} is already being unloaded"
                if draining else
                f"no reference voice named {(name or '').strip()[:64]!r} is loaded"
                + (f" (loaded: {', '.join(loaded)})" if loaded else "")), field="name")
        if entry.state == LOADING:
            raise ReferenceRefusal(Status.FAILED_PRECONDITION,
                                   f"reference voice {entry.name!r} is still loading; unload "
                                   f"it after", field="name")
        del self._live[_key(name)]
        entry.state = DRAINING
        freed = entry.sessions <= 0
        if not freed:
            self._draining.append(entry)
        self._publish()
        if freed:
            self._freed(entry)
        return entry, freed

    # -- reading ---------------------------------------------------------------------------

    def entries(self) -> list[ReferenceEntry]:
        """Every reference voice (loading, loaded, draining), in the order they came."""
        return self._sorted(list(self._live.values()) + self._draining)

    def loaded(self) -> list[ReferenceVoice]:
        """The LOADED voices, in the order they came (what the voice list shows)."""
        return [e.voice for e in self._sorted(self._live.values()) if e.state == LOADED]

    # -- inside ----------------------------------------------------------------------------

    @staticmethod
    def _sorted(entries) -> list[ReferenceEntry]:
        return sorted(entries, key=lambda e: e.order)

    def _publish(self) -> None:
        self.references = {r.name.casefold(): r for r in self.loaded()}
        if self.on_change is not None:
            self.on_change()

    def _freed(self, entry: ReferenceEntry) -> None:
        if self.on_free is not None:
            self.on_free(entry.voice)
