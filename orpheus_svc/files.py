"""Read a small file that holds one mapping: a checkpoint's or SNAC's config.json, voices.json,
the engine manifest, the server's YAML config.

A leaf module (nothing else of orpheus_svc). Each caller passes its own error class, so a bad
file is still that caller's error (SnacLoadError, ManifestError, VoiceRegistryError,
ConfigError, ValueError); the message names the file and says what is wrong with it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Literal

import yaml


def read_mapping(path: str | os.PathLike[str], error: Callable[[str], Exception], *,
                 what: str = "", syntax: Literal["JSON", "YAML"] = "JSON",
                 expected: str = "a JSON object",
                 missing: Callable[[str], Exception] | None = None) -> dict[str, Any]:
    """The mapping that `path` holds (UTF-8 text, parsed as `syntax`).

    Every failure raises `error(message)`; the message starts with "`what` `path`:" (only the
    path when `what` is empty) and goes on with what is wrong: "cannot read (<why>)", "not valid
    JSON: <the parser's message>" (or YAML), or "expected `expected`". `missing` is the error
    for a file that does not exist, where that must differ from `error`. An empty YAML
    document (or one that is null or false) reads as an empty mapping, as a config with no
    settings; JSON has no such case.
    """
    label = f"{what} {path}" if what else str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        make = missing if missing is not None and isinstance(exc, FileNotFoundError) else error
        raise make(f"{label}: cannot read ({exc.strerror or exc})") from exc
    try:  # a UnicodeDecodeError is a ValueError, as json's JSONDecodeError is
        text = data.decode("utf-8")
        raw = json.loads(text) if syntax == "JSON" else (yaml.safe_load(text) or {})
    except (ValueError, yaml.YAMLError) as exc:
        raise error(f"{label}: not valid {syntax}: {exc}") from exc
    if not isinstance(raw, dict):
        raise error(f"{label}: expected {expected}")
    return raw
