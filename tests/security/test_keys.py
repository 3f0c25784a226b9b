"""The pure key store and per-key limiter (orpheus_svc/security/keys.py)."""

from __future__ import annotations

import os

import pytest

from orpheus_svc.security.keys import (
    KeyFileError, KeyLimiter, KeyStore, MALFORMED_KEY, MISSING_KEY, WRONG_KEY, hash_key,
    parse_keys,
)

from .conftest import write_keys


def test_missing_malformed_wrong_and_right_keys(tmp_path):
    f = tmp_path / "keys.yaml"
    write_keys(f, ("agents", "secret-1", 0, 0))
    store = KeyStore(str(f))
    assert store.enabled and store.names() == ["agents"]
    assert store.authenticate(None).error == MISSING_KEY
    assert "authorization: Bearer <key>" in MISSING_KEY
    assert store.authenticate("Basic abc").error == MALFORMED_KEY
    assert store.authenticate("Bearer ").error == MALFORMED_KEY
    assert store.authenticate("Bearer nope").error == WRONG_KEY
    ok = store.authenticate("bearer  secret-1 ")
    assert ok.error is None and ok.key.name == "agents"


def test_the_file_holds_hashes_never_keys(tmp_path):
    with pytest.raises(KeyFileError, match="unknown field.*never the key") as exc:
        parse_keys("keys:\n  - name: a\n    key: hunter2\n", "f")
    assert "hunter2" not in str(exc.value)
    with pytest.raises(KeyFileError, match="64 hex"):
        parse_keys("keys:\n  - name: a\n    sha256: hunter2\n", "f")
    with pytest.raises(KeyFileError, match="used twice"):
        parse_keys(f"- {{name: a, sha256: {hash_key('x')}}}\n- {{name: a, sha256: {hash_key('y')}}}",
                   "f")
    with pytest.raises(KeyFileError, match="same key"):
        parse_keys(f"- {{name: a, sha256: {hash_key('x')}}}\n- {{name: b, sha256: {hash_key('x')}}}",
                   "f")
    with pytest.raises(KeyFileError, match="integer >= 0"):
        parse_keys(f"- {{name: a, sha256: {hash_key('x')}, sessions_per_minute: -1}}", "f")


def test_inline_document_and_a_missing_file(tmp_path):
    store = KeyStore(None, f'{{"keys": [{{"name": "env", "sha256": "{hash_key("k")}"}}]}}')
    assert store.enabled and store.authenticate("Bearer k").key.name == "env"
    assert not KeyStore(None, "").enabled
    with pytest.raises(KeyFileError, match="cannot read"):
        KeyStore(str(tmp_path / "absent.yaml"))


def test_the_file_is_reread_on_change_and_a_bad_version_keeps_the_old_keys(tmp_path):
    f = tmp_path / "keys.yaml"
    write_keys(f, ("a", "key-a", 0, 0))
    errors, reloads = [], []
    store = KeyStore(str(f), on_reload=reloads.append, on_error=errors.append)
    write_keys(f, ("b", "key-b", 0, 0))
    os.utime(f, ns=(1, 1))  # a different mtime even on coarse clocks
    assert store.authenticate("Bearer key-b").key.name == "b"
    assert store.authenticate("Bearer key-a").error == WRONG_KEY
    assert reloads == [["b"]]
    f.write_text("keys: [ {name: broken")
    assert store.authenticate("Bearer key-b").key.name == "b"
    assert store.authenticate("Bearer key-b").key.name == "b"
    assert len(errors) == 1 and "server.api_keys_file" in errors[0]


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_concurrent_session_limit_and_release():
    key = parse_keys(f"- {{name: a, sha256: {hash_key('x')}, max_concurrent_sessions: 2}}",
                     "f")[hash_key("x")]
    lim = KeyLimiter()
    l1, _ = lim.acquire(key)
    l2, _ = lim.acquire(key)
    none, why = lim.acquire(key)
    assert none is None and "max_concurrent_sessions=2" in why and "'a'" in why
    l1.release()
    l1.release()  # idempotent: a double release must not free a second slot
    l3, _ = lim.acquire(key)
    assert l3 is not None
    assert lim.acquire(key)[0] is None
    snap = lim.snapshot()["a"]
    assert snap["active"] == 2 and snap["sessions_total"] == 3
    assert snap["refused"] == {"max_concurrent_sessions": 2, "sessions_per_minute": 0}


def test_sessions_per_minute_is_a_sliding_window():
    key = parse_keys(f"- {{name: a, sha256: {hash_key('x')}, sessions_per_minute: 2}}",
                     "f")[hash_key("x")]
    clock = Clock()
    lim = KeyLimiter(clock)
    assert lim.acquire(key)[0] is not None
    clock.t += 30
    lease, _ = lim.acquire(key)
    lease.release()  # ended sessions still count for the minute
    lease, why = lim.acquire(key)
    assert lease is None and "sessions_per_minute=2" in why and "retry in 30 s" in why
    clock.t += 30.5  # the first start left the window
    assert lim.acquire(key)[0] is not None
    assert lim.acquire(key)[0] is None
    assert lim.snapshot()["a"]["refused"]["sessions_per_minute"] == 2


def test_the_admin_scope_is_read_and_anything_else_refused():
    keys = parse_keys(f"keys:\n  - {{name: ops, sha256: {hash_key('a')}, scopes: [admin]}}\n"
                      f"  - {{name: app, sha256: {hash_key('b')}}}\n", "f")
    by_name = {k.name: k for k in keys.values()}
    assert by_name["ops"].admin and not by_name["app"].admin
    store = KeyStore(inline=f'{{"keys": [{{"name": "ops", "sha256": "{hash_key("a")}", '
                            f'"scopes": ["admin"]}}]}}')
    assert store.names_with("admin") == ["ops"] and store.authenticate("Bearer a").key.admin
    with pytest.raises(KeyFileError, match=r"keys\[0\] \(ops\): unknown scope\(s\) 'root'"):
        parse_keys(f"- {{name: ops, sha256: {hash_key('a')}, scopes: [root]}}", "f")
    with pytest.raises(KeyFileError, match="scopes must be a list"):
        parse_keys(f"- {{name: ops, sha256: {hash_key('a')}, scopes: admin}}", "f")


def test_new_key_makes_an_admin_entry_that_loads_back(capsys):
    from orpheus_svc.security.__main__ import main

    assert main(["new-key", "ops", "--admin"]) == 0
    out, err = capsys.readouterr()
    key = err.split(": ")[-1].strip()
    (entry,) = parse_keys(out, "out").values()
    assert entry.name == "ops" and entry.admin and entry.sha256 == hash_key(key)
    assert main(["new-key", "app"]) == 0
    (plain,) = parse_keys(capsys.readouterr()[0], "out").values()
    assert not plain.admin
