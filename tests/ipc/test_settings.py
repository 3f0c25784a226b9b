"""server.topology and server.frontends: defaults, checks, and `orpheus-svc config`."""

import pytest

from orpheus_svc.app.cli import main
from orpheus_svc.config import ConfigError, load_config


def test_single_is_the_default():
    s = load_config(environ={}).server
    assert (s.topology, s.frontends) == ("single", 2)


def test_split_and_front_ends_are_settings():
    s = load_config(environ={"ORPHEUS_SERVER__TOPOLOGY": "split"},
                    overrides={"server.frontends": "4"}).server
    assert (s.topology, s.frontends) == ("split", 4)


def test_bad_values_name_the_setting():
    with pytest.raises(ConfigError, match="server.topology must be single or split"):
        load_config(environ={}, overrides={"server.topology": "multi"})
    with pytest.raises(ConfigError, match="server.frontends must be 1..64"):
        load_config(environ={}, overrides={"server.frontends": "0"})


def test_config_command_shows_them(capsys):
    assert main(["config", "--set", "server.topology=split", "--set", "server.frontends=3"]) == 0
    out = capsys.readouterr().out
    assert "  topology: split\n" in out and "  frontends: 3\n" in out
