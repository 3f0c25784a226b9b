"""The one way a settings object checks its values (pure; no I/O).

Every settings dataclass (SchedulerSettings, FlusherSettings, the sections of the service's
Config) checks its own fields in __post_init__ with `require`, so each rule is written once,
next to the field it guards. A failed check raises SettingError naming the field; the config
loader (orpheus_svc/config.py) re-words it with the section the field sits in, so the
person who set it reads e.g. "engine.max_batch_size must be >= 1, got 0".
"""

from __future__ import annotations

import math
from typing import Any


class SettingError(ValueError):
    """One setting is out of range: `owner.name why, got value`."""

    def __init__(self, owner: str, name: str, why: str, value: Any) -> None:
        self.owner, self.name, self.why, self.value = owner, name, why, value
        super().__init__(self.worded(owner))

    def worded(self, owner: str) -> str:
        """The message with `owner` (a class or a config section) in front of the name."""
        return f"{owner}.{self.name} {self.why}, got {self.value!r}"


def require(ok: bool, obj: Any, name: str, why: str) -> None:
    """Raise SettingError for `obj.name` unless `ok`."""
    if not ok:
        raise SettingError(type(obj).__name__, name, why, getattr(obj, name))


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
