"""engine.row_budget defaults to `auto` (issue 29 item 11): on wherever the backend runs at
real time (sim, trtllm, torch or graph on CUDA), off on the CPU demo, where it would only
delay later segments; true/false still decide. The choice is logged at start-up."""

import logging

import pytest

from orpheus_svc.config import ConfigError, load_config


def _engine(**overrides):
    return load_config(environ={}, overrides={f"engine.{k}": v for k, v in overrides.items()}).engine


def test_the_default_is_auto():
    assert _engine().row_budget == "auto"


@pytest.mark.parametrize("backend, device, on", [
    ("torch", "cpu", False), ("graph", "cpu", False),
    ("torch", "cuda", True), ("graph", "cuda", True),
    ("sim", "cpu", True), ("sim", "cuda", True), ("trtllm", "cuda", True),
])
def test_auto_is_on_where_the_backend_runs_at_real_time(backend, device, on):
    e = _engine(backend=backend)
    choice, why = e.row_budget_choice(device)
    assert choice is on and backend in why and ("auto" in why)
    assert e.scheduler_settings(device).row_budget is on


@pytest.mark.parametrize("value, on", [("true", True), ("on", True), (True, True),
                                       ("false", False), ("off", False), (False, False)])
def test_true_and_false_decide_whatever_the_backend(value, on):
    for backend, device in (("torch", "cpu"), ("sim", "cuda")):
        e = _engine(backend=backend, row_budget=value)
        assert e.row_budget_choice(device)[0] is on
        assert e.scheduler_settings(device).row_budget is on


def test_other_values_name_the_setting():
    with pytest.raises(ConfigError, match="engine.row_budget must be auto, true or false"):
        _engine(row_budget="sometimes")


def test_the_choice_is_logged_when_the_engine_is_built(caplog):
    from orpheus_svc.runtime import build_runtime

    config = load_config(environ={}, overrides={"engine.backend": "sim",
                                                "engine.max_sessions": 2})
    with caplog.at_level(logging.INFO, logger="orpheus_svc.runtime"):
        runtime = build_runtime(config)
    assert runtime.engine.settings.row_budget is True
    assert "engine.row_budget=auto: on" in caplog.text
