import pytest

from orpheus_svc.config import Config, ConfigError, load_config


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
    with pytest.raises(ConfigError, match="FlusherSettings.lookahead_samples"):
        load_config(environ={}, overrides={"flusher.lookahead_samples": "100"})


def test_missing_config_file_is_reported(tmp_path):
    with pytest.raises(ConfigError, match="config file"):
        load_config(tmp_path / "nope.yaml", environ={})


def test_scheduler_settings_follow_engine_config():
    cfg = load_config(environ={}, overrides={"engine.max_batch_size": 7, "engine.aging_steps": 9})
    s = cfg.engine.scheduler_settings()
    assert s.max_batch_size == 7 and s.aging_steps == 9
