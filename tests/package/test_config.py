import dataclasses
import warnings

import pytest

from orpheus_svc.app.cli import main
from orpheus_svc.config import Config, ConfigError, dump, load_config
from orpheus_svc.core.scheduler_settings import SchedulerSettings


def test_defaults_load_and_are_frozen():
    cfg = load_config(environ={})
    assert isinstance(cfg, Config) and cfg.profile == "conversational"
    with pytest.raises(Exception):
        cfg.engine.max_batch_size = 3


def test_precedence_profile_file_env_flags(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("profile: longform\nengine:\n  max_batch_size: 8\n  max_waiting: 5\nserver:\n  port: 6000\n")
    env = {"ORPHEUS_ENGINE__MAX_BATCH_SIZE": "12", "ORPHEUS_SERVER__REFLECTION": "false"}
    cfg = load_config(f, environ=env, overrides={"server.port": "7000"})
    assert cfg.profile == "longform" and cfg.text.max_text_chars == 5000  # from the profile
    assert cfg.engine.max_waiting == 5          # file
    assert cfg.engine.max_batch_size == 12      # env beats file
    assert cfg.server.reflection is False
    assert cfg.server.port == 7000              # flag beats file


def test_unknown_setting_is_named(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("engine:\n  max_bach_size: 8\n")
    with pytest.raises(ConfigError, match=r"engine\.max_bach_size: unknown setting"):
        load_config(f, environ={})


def test_bad_values_name_the_setting():
    with pytest.raises(ConfigError, match="engine.max_batch_size: expected int"):
        load_config(environ={"ORPHEUS_ENGINE__MAX_BATCH_SIZE": "lots"})
    with pytest.raises(ConfigError, match="engine.backend must be"):
        load_config(environ={}, overrides={"engine.backend": "onnx"})
    with pytest.raises(ConfigError, match="profile"):
        load_config(environ={"ORPHEUS_PROFILE": "fast"})
    # a section's own check, worded with the section the person wrote
    with pytest.raises(ConfigError, match="flusher.lookahead_samples must be a non-negative"):
        load_config(environ={}, overrides={"flusher.lookahead_samples": "100"})


def test_missing_config_file_is_reported(tmp_path):
    with pytest.raises(ConfigError, match="config file"):
        load_config(tmp_path / "nope.yaml", environ={})


def test_scheduler_settings_follow_engine_config():
    cfg = load_config(environ={}, overrides={"engine.max_batch_size": 7, "engine.aging_steps": 9})
    s = cfg.engine.scheduler_settings()
    assert s.max_batch_size == 7 and s.aging_steps == 9


def test_scheduler_settings_have_the_config_names():
    """One name per setting: every SchedulerSettings field but the (bench-only) order is an
    engine.<name> setting, with the same default."""
    engine = {f.name: f.default for f in dataclasses.fields(load_config(environ={}).engine)}
    sched = SchedulerSettings()
    for f in dataclasses.fields(SchedulerSettings):
        if f.name not in ("priority", "row_budget"):
            assert f.name in engine and engine[f.name] == getattr(sched, f.name), f.name
    # row_budget's default is "auto", resolved for the backend and device: off for the
    # default backend (torch) on the CPU, the scheduler's own default (test_row_budget_default)
    assert engine["row_budget"] == "auto"
    assert load_config(environ={}).engine.scheduler_settings("cpu").row_budget == sched.row_budget
    s = load_config(environ={}, overrides={"engine.max_ahead_seconds": "2.5"}).engine \
        .scheduler_settings()
    assert s.max_ahead_seconds == 2.5


@pytest.mark.parametrize("dotted, value, message", [
    ("engine.max_batch_size", "0", "engine.max_batch_size must be >= 1, got 0"),
    ("engine.max_waiting", "-1", "engine.max_waiting must be >= 0, got -1"),
    ("engine.aging_steps", "0", "engine.aging_steps must be >= 1, got 0"),
    ("engine.max_ahead_seconds", "-1", "engine.max_ahead_seconds must be >= 0, got -1.0"),
    ("engine.max_sessions", "0", "engine.max_sessions must be >= 1, got 0"),
    ("text.max_segment_chars", "10", "text.max_segment_chars must be between 20 and "
                                     "text.max_text_chars, got 10"),
    ("server.port", "70000", "server.port must be 0..65535, got 70000"),
    ("server.tls_key_file", "k.pem", "server.tls_key_file and server.tls_cert_file must be "
                                     "set together, got 'k.pem'"),
    ("session.idle_timeout_seconds", "-1", "session.idle_timeout_seconds must be >= 0 (0 = off)"),
    ("server.handshake_timeout_seconds", "0", "server.handshake_timeout_seconds must be > 0"),
    ("server.max_connection_idle_seconds", "-1",
     "server.max_connection_idle_seconds must be >= 0"),
    ("model.dtype", "int4", "model.dtype must be auto, float32, float16 or bfloat16, got 'int4'"),
])
def test_each_check_names_the_setting_as_the_file_does(dotted, value, message):
    with pytest.raises(ConfigError) as err:
        load_config(environ={}, overrides={dotted: value})
    assert str(err.value).startswith(message)


def test_removed_scheduler_policy_is_explained():
    with pytest.warns(FutureWarning, match="engine.scheduler_policy is deprecated and ignored"):
        cfg = load_config(environ={}, overrides={"engine.scheduler_policy": "deadline"})
    assert not hasattr(cfg.engine, "scheduler_policy")
    with pytest.raises(ConfigError, match="engine.scheduler_policy: this setting was removed.*"
                                          "bench/orpheus_bench/policies.py"):
        load_config(environ={"ORPHEUS_ENGINE__SCHEDULER_POLICY": "fifo"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_config(environ={})  # nothing to say when the key is absent


def test_dump_loads_back_to_the_same_config(tmp_path):
    cfg = load_config(environ={"ORPHEUS_SERVER__PORT": "6001"},
                      overrides={"profile": "longform", "engine.max_batch_size": "8",
                                 "model.voices": "tara:en, leo:en"})
    f = tmp_path / "effective.yaml"
    f.write_text(dump(cfg))
    assert load_config(f, environ={}) == cfg


def test_config_command_prints_the_effective_configuration(tmp_path, capsys, monkeypatch):
    f = tmp_path / "c.yaml"
    f.write_text("engine:\n  max_batch_size: 8\n  max_waiting: 5\n")
    monkeypatch.setenv("ORPHEUS_ENGINE__MAX_WAITING", "6")
    assert main(["config", "--config", str(f), "--backend", "sim",
                 "--set", "engine.aging_steps=9"]) == 0
    out = capsys.readouterr().out
    printed = tmp_path / "printed.yaml"
    printed.write_text(out)
    e = load_config(printed, environ={}).engine
    assert (e.max_batch_size, e.max_waiting, e.aging_steps, e.backend) == (8, 6, 9, "sim")
    assert "engine:\n" in out and "  max_batch_size: 8\n" in out


def test_config_command_reports_configuration_errors(capsys):
    assert main(["config", "--set", "engine.max_batch_size=0"]) == 2
    assert "engine.max_batch_size must be >= 1" in capsys.readouterr().err


def test_config_command_from_the_shell_needs_no_model_and_no_server_stack(tmp_path):
    import os
    import subprocess
    import sys
    env = {**os.environ, "ORPHEUS_ENGINE__MAX_WAITING": "7"}
    probe = ("import sys; from orpheus_svc.app.cli import main; code = main(sys.argv[1:]); "
             "assert 'torch' not in sys.modules and 'grpc' not in sys.modules; sys.exit(code)")
    run = subprocess.run([sys.executable, "-c", probe, "config", "--profile", "longform"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    f = tmp_path / "out.yaml"
    f.write_text(run.stdout)
    cfg = load_config(f, environ={})
    assert cfg.profile == "longform" and cfg.engine.max_waiting == 7
    assert cfg.engine.max_ahead_seconds == 3.0  # from the profile


@pytest.mark.parametrize("setting,value,needle", [
    ("http.max_body_bytes", 10, "http.max_body_bytes must be >= 1024"),
    ("http.body_timeout_seconds", -1, "http.body_timeout_seconds must be >= 0"),
    ("http.max_pending_connections", 0, "http.max_pending_connections must be >= 1"),
])
def test_http_bounds_are_checked_and_named(setting, value, needle):
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.")):
        load_config(overrides={setting: value}, environ={})


def test_http_bounds_are_on_by_default():
    http = load_config(environ={}).http
    assert http.max_body_bytes > 0 and http.head_timeout_seconds > 0
    assert http.body_timeout_seconds > 0 and http.ws_config_timeout_seconds > 0


@pytest.mark.parametrize("setting,value,needle", [
    ("temperature", "5", "sampling.temperature: temperature must be in [0, 2], got 5.0"),
    ("top_p", "0", "sampling.top_p: top_p must be in (0, 1], got 0.0"),
    ("repetition_penalty", "0.5", "sampling.repetition_penalty: repetition_penalty must be in "
                                  "[1, 2], got 0.5"),
    ("seed", "7", "sampling.seed: a seed belongs to a session"),
])
def test_the_sampling_defaults_are_checked_at_start_up_and_name_where_they_came_from(
        tmp_path, setting, value, needle):
    """An operator's sampling default out of range is a configuration error naming the
    setting and its source, never every request's INVALID_ARGUMENT later."""
    with pytest.raises(ConfigError) as err:
        load_config(environ={}, overrides={f"sampling.{setting}": value})
    assert str(err.value).startswith(needle)
    assert f"(from flag --set sampling.{setting})" in str(err.value)
    f = tmp_path / "c.yaml"
    f.write_text(f"sampling:\n  {setting}: {value}\n")
    with pytest.raises(ConfigError, match=f"from config file {f}"):
        load_config(f, environ={})
    env = {f"ORPHEUS_SAMPLING__{setting.upper()}": value}
    with pytest.raises(ConfigError, match=f"from environment ORPHEUS_SAMPLING__{setting.upper()}"):
        load_config(environ=env)


def test_serve_with_an_out_of_range_sampling_default_exits_at_start_up(capsys):
    assert main(["serve", "--set", "sampling.temperature=5", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "sampling.temperature: temperature must be in [0, 2], got 5.0" in err
    assert "flag --set sampling.temperature" in err


def test_the_sampling_defaults_are_the_requests_own():
    from orpheus_svc.core.request import SamplingParams
    assert load_config(environ={}).sampling == SamplingParams()


def test_reference_voices_are_read_from_yaml_and_checked_at_load(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  reference_dirs: [/srv/clips]\n  reference_voices:\n"
                    "    - {name: ann, clip: /srv/clips/ann.wav, transcript: Hello there.}\n")
    model = load_config(path, environ={}).model
    from orpheus_svc.core.lora_config import adapter_dirs
    from orpheus_svc.core.reference import ReferenceSource, reference_sources
    assert reference_sources(model.reference_voices) == (
        ReferenceSource("ann", "/srv/clips/ann.wav", "Hello there.", "en"),)
    assert adapter_dirs(model.reference_dirs, "model.reference_dirs") == ("/srv/clips",)
    path.write_text("model:\n  reference_voices:\n"
                    "    - {name: ann, clip: /srv/clips/ann.wav, transcript: ''}\n")
    with pytest.raises(ConfigError, match=r"model\.reference_voices\[0\]\.transcript"):
        load_config(path, environ={})
    with pytest.raises(ConfigError, match=r"model\.reference_dirs\[0\]: 'clips' must be an "
                                          r"absolute"):
        load_config(environ={}, overrides={"model.reference_dirs": "clips"})
