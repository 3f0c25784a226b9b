"""API keys and per-key session limits: pure logic, no grpc, no web framework.

The gRPC interceptor (orpheus_svc/server/auth.py) and the HTTP edge (orpheus_svc/http/auth.py)
both use one KeyStore (which keys exist) and one KeyLimiter (how many sessions each may have),
so a key's limits hold across both edges.

Key file (server.api_keys_file, YAML or JSON), or the same document inline in server.api_keys
(e.g. the environment variable ORPHEUS_SERVER__API_KEYS):

    keys:
      - name: agents            # what logs and metrics show; the key itself is never stored
        sha256: 9f86d081...     # hex SHA-256 of the key (python -m orpheus_svc.security new-key NAME)
        max_concurrent_sessions: 8   # 0 or absent = no limit
        sessions_per_minute: 120     # 0 or absent = no limit
        scopes: [admin]              # optional: admin = may call orpheus.admin.v1 too

The file is re-read when it changes (stat on each authentication: mtime, size, inode, so a
Kubernetes Secret's symlink swap is seen); a file that does not parse keeps the previous keys
and reports the error once, so a half-written file never locks everyone out.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import yaml

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_WINDOW_S = 60.0

MISSING_KEY = ("this server requires an API key: send the metadata 'authorization: Bearer <key>' "
               "(HTTP: the Authorization header)")
MALFORMED_KEY = "the authorization metadata must be 'Bearer <key>'"
WRONG_KEY = ("the API key is not valid: send 'authorization: Bearer <key>' with a key this server "
             "knows")


# What a key may do beyond synthesis (every key may synthesize, list voices, ...):
#   admin   call the admin service (orpheus.admin.v1: load and unload LoRA adapters)
ADMIN = "admin"
SCOPES = frozenset({ADMIN})


class KeyFileError(ValueError):
    """The key file or inline document is invalid; the message says where and why."""


@dataclass(frozen=True)
class ApiKey:
    """One accepted key: its name, the SHA-256 of the key, its limits (0 = none) and its
    scopes (SCOPES)."""

    name: str
    sha256: str
    max_concurrent_sessions: int = 0
    sessions_per_minute: int = 0
    scopes: frozenset[str] = frozenset()

    @property
    def admin(self) -> bool:
        """May call the admin service."""
        return ADMIN in self.scopes


@dataclass(frozen=True)
class AuthResult:
    """The caller's key, or why it was refused (a message telling the caller what to send)."""

    key: ApiKey | None
    error: str | None = None


def hash_key(key: str) -> str:
    """The hex SHA-256 the key file stores for `key`."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def parse_bearer(value: str | None) -> str | None | AuthResult:
    """The key in an `authorization` value, None when absent, or an AuthResult refusal."""
    if value is None or not value.strip():
        return None
    scheme, _, token = value.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return AuthResult(None, MALFORMED_KEY)
    return token


def _int_field(entry: dict, name: str, where: str) -> int:
    value = entry.get(name, 0)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise KeyFileError(f"{where}: {name} must be an integer >= 0, got {value!r}")
    return value


def parse_keys(text: str, where: str) -> dict[str, ApiKey]:
    """Keys by their SHA-256 from a YAML/JSON document (`keys:` list, or the list itself)."""
    try:
        doc = yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError as exc:
        raise KeyFileError(f"{where}: not valid YAML/JSON ({exc.__class__.__name__})") from None
    if doc is None:
        return {}
    entries = doc.get("keys") if isinstance(doc, dict) else doc
    if entries is None:
        entries = []
    if not isinstance(entries, list):
        raise KeyFileError(f"{where}: expected a 'keys:' list of entries")
    keys: dict[str, ApiKey] = {}
    names: set[str] = set()
    for i, entry in enumerate(entries):
        at = f"{where}: keys[{i}]"
        if not isinstance(entry, dict):
            raise KeyFileError(f"{at}: expected a mapping with name and sha256")
        unknown = set(entry) - {"name", "sha256", "max_concurrent_sessions", "sessions_per_minute",
                                "scopes"}
        if unknown:
            # 'key:' here would mean someone pasted a key in clear: say so without echoing it
            raise KeyFileError(f"{at}: unknown field(s) {', '.join(sorted(unknown))} "
                               "(store the key's sha256, never the key)")
        name = str(entry.get("name", ""))
        digest = str(entry.get("sha256", "")).strip().lower()
        if not _NAME.match(name):
            raise KeyFileError(f"{at}: name must be 1-64 of A-Z a-z 0-9 _ . - , got {name!r}")
        if not _HEX64.match(digest):
            raise KeyFileError(f"{at} ({name}): sha256 must be 64 hex digits")
        if name in names:
            raise KeyFileError(f"{at}: name {name!r} is used twice")
        if digest in keys:
            raise KeyFileError(f"{at} ({name}): same key as {keys[digest].name!r}")
        names.add(name)
        keys[digest] = ApiKey(name, digest, _int_field(entry, "max_concurrent_sessions", at),
                              _int_field(entry, "sessions_per_minute", at),
                              _scopes(entry, f"{at} ({name})"))
    return keys


def _scopes(entry: dict, where: str) -> frozenset[str]:
    value = entry.get("scopes")
    if value is None:
        return frozenset()
    if isinstance(value, str) or not isinstance(value, list) \
            or not all(isinstance(v, str) for v in value):
        raise KeyFileError(f"{where}: scopes must be a list of names, e.g. [admin]")
    unknown = sorted(set(value) - SCOPES)
    if unknown:
        raise KeyFileError(f"{where}: unknown scope(s) {', '.join(repr(v) for v in unknown)} "
                           f"(known: {', '.join(sorted(SCOPES))})")
    return frozenset(value)


def _noop(*_args, **_kw) -> None:
    return None


class KeyStore:
    """The accepted keys, from a file (re-read on change) and/or an inline document.

    `on_reload(names)` and `on_error(message)` are called when the file is re-read or fails
    to parse (for logging; messages never contain a key). A store with no source is
    disabled: `enabled` is False and every caller is admitted.
    """

    def __init__(self, path: str | None = None, inline: str = "", *,
                 on_reload: Callable[[list[str]], None] = _noop,
                 on_error: Callable[[str], None] = _noop) -> None:
        self.path = path or None
        self._inline = parse_keys(inline, "server.api_keys") if inline.strip() else {}
        self.enabled = bool(self.path) or bool(inline.strip())
        self._on_reload, self._on_error = on_reload, on_error
        self._lock = threading.Lock()
        self._stamp: tuple | None = None
        self._failed_stamp: tuple | None = None
        self._from_file: dict[str, ApiKey] = {}
        self._keys: dict[str, ApiKey] = dict(self._inline)
        if self.path:
            self._load(self._stat(), initial=True)

    def _stat(self) -> tuple | None:
        try:
            st = os.stat(self.path)  # follows symlinks: a Secret's ..data swap changes the inode
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino, st.st_dev)

    def _load(self, stamp: tuple | None, initial: bool = False) -> None:
        try:
            with open(self.path, encoding="utf-8") as f:
                text = f.read()
            from_file = parse_keys(text, f"server.api_keys_file {self.path}")
            merged = dict(self._inline)
            for digest, key in from_file.items():
                clash = [k.name for k in merged.values() if k.name == key.name]
                if digest in merged or clash:
                    raise KeyFileError(f"server.api_keys_file {self.path}: key {key.name!r} is "
                                       "also in server.api_keys")
                merged[digest] = key
        except (OSError, KeyFileError) as exc:
            msg = str(exc) if isinstance(exc, KeyFileError) else \
                f"server.api_keys_file {self.path}: cannot read ({exc.strerror or exc})"
            if initial:
                raise KeyFileError(msg) from None
            if stamp != self._failed_stamp:  # report each bad version once
                self._failed_stamp = stamp
                self._on_error(msg)
            return
        self._stamp, self._failed_stamp = stamp, None
        self._from_file, self._keys = from_file, merged
        if not initial:
            self._on_reload(self.names())

    def refresh(self) -> None:
        """Re-read the file if it changed since it was last read."""
        if not self.path:
            return
        stamp = self._stat()
        if stamp != self._stamp and stamp != self._failed_stamp:
            with self._lock:
                if stamp != self._stamp:
                    self._load(stamp)

    def names(self) -> list[str]:
        return sorted(k.name for k in self._keys.values())

    def names_with(self, scope: str) -> list[str]:
        """The names of the keys that have `scope` (e.g. ADMIN), as the store holds them now."""
        return sorted(k.name for k in self._keys.values() if scope in k.scopes)

    def authenticate(self, authorization: str | None) -> AuthResult:
        """The key for an `authorization` value ('Bearer <key>'), or a refusal."""
        self.refresh()
        token = parse_bearer(authorization)
        if isinstance(token, AuthResult):
            return token
        if token is None:
            return AuthResult(None, MISSING_KEY)
        key = self._keys.get(hash_key(token))
        if key is None:
            return AuthResult(None, WRONG_KEY)
        return AuthResult(key)


@dataclass
class _KeyState:
    active: int = 0
    starts: collections.deque = field(default_factory=collections.deque)
    sessions_total: int = 0
    refused: dict = field(default_factory=lambda: {"max_concurrent_sessions": 0,
                                                   "sessions_per_minute": 0})


class Lease:
    """One admitted session of a key; release() when it ends (idempotent)."""

    def __init__(self, limiter: "KeyLimiter", name: str) -> None:
        self._limiter, self.name, self._held = limiter, name, True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._limiter._release(self.name)


class KeyLimiter:
    """Per-key concurrent sessions and sessions per (sliding) minute, with counters.

    Counters are kept per key name, so metrics have one series per configured key (bounded
    by the key file). Refused attempts do not count towards sessions per minute.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._state: dict[str, _KeyState] = {}

    def acquire(self, key: ApiKey) -> tuple[Lease | None, str | None]:
        """(lease, None) when the key may open one more session, else (None, refusal)."""
        now = self._clock()
        with self._lock:
            st = self._state.setdefault(key.name, _KeyState())
            while st.starts and st.starts[0] <= now - _WINDOW_S:
                st.starts.popleft()
            if key.max_concurrent_sessions and st.active >= key.max_concurrent_sessions:
                st.refused["max_concurrent_sessions"] += 1
                return None, (f"API key '{key.name}' already has {st.active} sessions open, its "
                              f"limit (max_concurrent_sessions={key.max_concurrent_sessions}); "
                              "end one first")
            if key.sessions_per_minute and len(st.starts) >= key.sessions_per_minute:
                wait = max(1, int(st.starts[0] + _WINDOW_S - now + 0.999))
                st.refused["sessions_per_minute"] += 1
                return None, (f"API key '{key.name}' started {len(st.starts)} sessions in the "
                              f"last minute, its limit (sessions_per_minute="
                              f"{key.sessions_per_minute}); retry in {wait} s")
            st.active += 1
            st.sessions_total += 1
            st.starts.append(now)
            return Lease(self, key.name), None

    def _release(self, name: str) -> None:
        with self._lock:
            self._state[name].active -= 1

    def snapshot(self) -> dict[str, dict]:
        """Per key name: active, sessions_total, refused {limit: n} (for metrics)."""
        with self._lock:
            return {name: {"active": st.active, "sessions_total": st.sessions_total,
                           "refused": dict(st.refused)} for name, st in self._state.items()}


def new_key() -> str:
    """A fresh random key (URL-safe, 256 bits) with a recognisable prefix."""
    import secrets
    return "ok_" + secrets.token_urlsafe(32)


def entry_for(name: str, key: str, max_concurrent_sessions: int = 0,
              sessions_per_minute: int = 0, scopes: tuple[str, ...] = ()) -> str:
    """A key-file entry (YAML) for `key`, storing only its hash."""
    entry = {"name": name, "sha256": hash_key(key),
             "max_concurrent_sessions": max_concurrent_sessions,
             "sessions_per_minute": sessions_per_minute}
    if scopes:
        entry["scopes"] = sorted(set(scopes))
    return json.dumps(entry)
