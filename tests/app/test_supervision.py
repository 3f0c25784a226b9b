"""The rules of issue 36's fault handling as pure functions: how long a stall is (without
the watcher's own freezes), what a stall means, and when a dead front-end is restarted."""

import signal

import pytest

from orpheus_svc.app.supervision import RestartPolicy, describe_exit
from orpheus_svc.engine.watchdog import StallMeter, StallPolicy


def test_a_stall_counts_the_watchers_ticks_not_its_freezes():
    m = StallMeter(max_gap=1.0)
    assert m.update(0.0, True, "step 1") == 0.0
    assert m.update(0.25, True, "step 1") == 0.25
    assert m.update(30.25, True, "step 1") == 1.25  # frozen 30 s: counts as 1 s
    assert m.update(30.5, True, "step 2") == 0.0    # the next step: from 0
    assert m.update(30.75, True, "step 2") == 0.25
    assert m.update(31.0, False, "step 2") == 0.0   # between steps


def test_the_stall_policy_turns_health_then_ends_calls_then_exits():
    p = StallPolicy(timeout_s=10.0, exit_s=30.0)
    assert p.healthy(1.9) and not p.healthy(2.0)
    assert not p.ends_calls(9.9) and p.ends_calls(10.0)
    assert not p.exits(29.9) and p.exits(30.0)
    assert not StallPolicy(10.0, 0.0).exits(1e9)  # 0: never
    assert not StallPolicy(1.0).healthy(1.0)  # a timeout under 2 s: NOT_SERVING from it on
    assert "engine_stall_timeout_seconds=10" in p.reason(10.2)


def test_restarts_back_off_and_a_crash_loop_is_called_one():
    r = RestartPolicy(max_restarts=3, window_s=60.0)
    assert [r.on_death(t) for t in (0.0, 1.0, 2.0)] == [0.5, 1.0, 2.0]
    assert r.on_death(3.0) is None  # a 4th death within 60 s
    r = RestartPolicy(max_restarts=3, window_s=60.0)
    assert [r.on_death(t) for t in (0.0, 61.0, 122.0, 183.0)] == [0.5] * 4  # spread out: fine
    assert RestartPolicy(0, 60.0).on_death(0.0) is None  # no restarts: a death stops it all
    capped = RestartPolicy(100, 60.0)
    assert max(capped.on_death(float(t)) for t in range(40)) == 10.0


@pytest.mark.parametrize("code, text", [(0, "exit code 0"), (3, "exit code 3"),
                                        (-signal.SIGKILL, "signal SIGKILL"), (None, "still running")])
def test_a_death_is_logged_with_its_code_or_signal(code, text):
    assert describe_exit(code) == text


@pytest.mark.parametrize("overrides, message", [
    ({"server.engine_stall_timeout_seconds": "0"},
     "server.engine_stall_timeout_seconds must be > 0"),
    ({"server.engine_stall_timeout_seconds": "20", "server.engine_stall_exit_seconds": "15"},
     "server.engine_stall_exit_seconds must be 0 (never) or >= server.engine_stall_timeout"),
    ({"server.frontend_max_restarts": "-1"}, "server.frontend_max_restarts must be >= 0"),
    ({"server.frontend_restart_window_seconds": "0"},
     "server.frontend_restart_window_seconds must be > 0"),
])
def test_the_fault_settings_are_checked_and_named(overrides, message):
    from orpheus_svc.config import ConfigError, load_config
    with pytest.raises(ConfigError) as err:
        load_config(environ={}, overrides=overrides)
    assert str(err.value).startswith(message)
    assert load_config(environ={}, overrides={"server.engine_stall_exit_seconds": "0"})
