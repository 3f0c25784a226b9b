"""One version per distribution, shown where a user or operator looks (issue 26): the CLIs'
--version, the server's start-up log and GetStatus; CHANGELOG.md names it; and the server's
requirement on the client admits the client it is released with."""

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

import orpheus_svc
import orpheus_tts_client
from orpheus_svc.app.cli import main as svc_main
from orpheus_tts_client.cli import main as say_main

ROOT = Path(__file__).resolve().parents[2]
SEMVER = re.compile(r"^\d+\.\d+\.\d+$")


def _project(path: Path) -> dict:
    return tomllib.loads(path.read_text())


@pytest.mark.parametrize("pyproject, attr, module", [
    ("pyproject.toml", "orpheus_svc.__version__", orpheus_svc),
    ("clients/python/pyproject.toml", "orpheus_tts_client.__version__", orpheus_tts_client),
])
def test_each_distribution_reads_its_version_from_one_place(pyproject, attr, module):
    data = _project(ROOT / pyproject)
    assert "version" not in data["project"], "a second, static version in pyproject.toml"
    assert data["project"]["dynamic"] == ["version"]
    assert data["tool"]["setuptools"]["dynamic"]["version"] == {"attr": attr}
    assert SEMVER.match(module.__version__), module.__version__


@pytest.mark.parametrize("main, prog, module", [
    (svc_main, "orpheus-svc", orpheus_svc), (say_main, "orpheus-say", orpheus_tts_client)])
def test_version_flag_prints_the_version_and_exits_0(main, prog, module, capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"{prog} {module.__version__}"


def test_changelog_names_the_current_version_of_both_distributions():
    text = (ROOT / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in text
    released = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", text, re.M)
    assert released, "no release heading '## [X.Y.Z] - YYYY-MM-DD'"
    # newest first (Keep a Changelog); the packages are at the newest release
    assert released[0] == orpheus_svc.__version__
    assert f"orpheus-tts-client {orpheus_tts_client.__version__}" in text


def test_the_server_requires_a_client_that_includes_this_release_s():
    server = _project(ROOT / "pyproject.toml")["project"]["optional-dependencies"]["server"]
    (req,) = [Requirement(r) for r in server if r.startswith("orpheus-tts-client")]
    assert req.specifier, "unbounded: any client release's stubs would do"
    assert req.specifier.contains(orpheus_tts_client.__version__)


def test_status_snapshot_carries_the_server_version_and_the_api_package_is_v1():
    from orpheus_svc.config import load_config
    from orpheus_svc.server.servicer import API_VERSION
    from orpheus_svc.server.state import ServerState

    status = ServerState(load_config(environ={})).status()
    assert status.server_version == orpheus_svc.__version__
    assert API_VERSION == "orpheus.tts.v1"
