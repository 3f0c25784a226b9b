"""A session's hold on a catalog's entry (pure): a LoRA adapter (core/adapters.py) or a
reference voice (core/reference_catalog.py). The catalog counts it from the lease's making
to its `release()`, which gives it back once however often it is called (a session's end
and its error path may both call it)."""

from __future__ import annotations

from typing import Any


class Lease:
    def __init__(self, catalog: Any, entry: Any) -> None:
        self._catalog, self.entry, self._held = catalog, entry, True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._catalog._release(self.entry)
