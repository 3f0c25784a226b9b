"""What each distribution ships, as `python -m build` makes it (issue 26): the sdists build
wheels that hold every module and data file the packages have in git (the playground page,
the .proto beside its stubs, py.typed) and nothing else (no tests, no benchmark results);
versions and entry points are the ones users will run; `twine check` passes.

`python -m build` builds each wheel from its sdist, so a file the sdist leaves out is missing
from the wheel too. The build runs on a copy of the tracked (and new, not ignored) files,
since leftovers of earlier builds in the checkout can put files into an sdist. ORPHEUS_DIST_DIR points the tests at dists built already (the test
command's wheel smoke, scripts/wheel-smoke.sh); otherwise they are built here."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

import orpheus_svc
import orpheus_tts_client

ROOT = Path(__file__).resolve().parents[2]
SERVER_PACKAGES = {"orpheus_svc": "orpheus_svc", "engine_builder": "engine_builder",
                   "orpheus_bench": "bench/orpheus_bench"}  # wheel top level -> source dir
CLIENT_SRC = "clients/python/src"
_spec = importlib.util.spec_from_file_location(
    "source_tree", ROOT / "scripts" / "release" / "source_tree.py")
source_tree = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(source_tree)


@pytest.fixture(scope="module")
def dists(tmp_path_factory) -> Path:
    given = os.environ.get("ORPHEUS_DIST_DIR")
    if given:
        return Path(given)
    out = tmp_path_factory.mktemp("dist")
    src = tmp_path_factory.mktemp("src")  # what a clean clone holds: no earlier build's leftovers
    source_tree.copy_tree(src)
    for project in (src, src / "clients" / "python"):
        subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(project)],
                       check=True, capture_output=True, timeout=600)
    return out


def _tracked(under: str) -> set[str]:
    out = subprocess.run(["git", "ls-files", under], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout.split()
    return {p for p in out if "/__pycache__/" not in p and not p.endswith(".gitignore")}


def _wheel(dists: Path, name: str, version: str) -> zipfile.ZipFile:
    path = dists / f"{name}-{version}-py3-none-any.whl"
    assert path.exists(), f"no {path.name} in {sorted(p.name for p in dists.iterdir())}"
    return zipfile.ZipFile(path)


def _metadata(wheel: zipfile.ZipFile, dist: str, version: str):
    return Parser().parsestr(wheel.read(f"{dist}-{version}.dist-info/METADATA").decode())


def test_server_wheel_holds_every_tracked_file_of_its_packages_and_nothing_else(dists):
    v = orpheus_svc.__version__
    names = set(_wheel(dists, "orpheus_svc", v).namelist())
    shipped = {n for n in names if not n.startswith(f"orpheus_svc-{v}.dist-info/")}
    expected = set()
    for top, src in SERVER_PACKAGES.items():
        expected |= {top + p[len(src):] for p in _tracked(src)}
    assert sorted(expected - shipped) == [], "tracked files missing from the server wheel"
    assert sorted(shipped - expected) == [], "files in the server wheel that git does not track"
    assert "orpheus_svc/http/playground.html" in shipped  # the page GET / serves
    assert not any(n.startswith(("tests/", "bench/", "results/")) or "/results/" in n
                   for n in names)


def test_client_wheel_holds_the_proto_its_stubs_and_py_typed_and_nothing_else(dists):
    v = orpheus_tts_client.__version__
    names = set(_wheel(dists, "orpheus_tts_client", v).namelist())
    shipped = {n for n in names if not n.startswith(f"orpheus_tts_client-{v}.dist-info/")}
    expected = {p[len(CLIENT_SRC) + 1:] for p in _tracked(CLIENT_SRC)}
    assert sorted(expected ^ shipped) == []
    stubs = "orpheus_tts_client/proto/v1/"
    for f in ("tts.proto", "tts_pb2.py", "tts_pb2.pyi", "tts_pb2_grpc.py"):
        assert stubs + f in shipped
    assert "orpheus_tts_client/py.typed" in shipped
    # the shipped contract is the repository's, byte for byte
    wheel = _wheel(dists, "orpheus_tts_client", v)
    assert wheel.read(stubs + "tts.proto") == (ROOT / "proto/orpheus/tts/v1/tts.proto").read_bytes()


def test_wheels_declare_version_commands_and_the_server_extra(dists):
    sv, cv = orpheus_svc.__version__, orpheus_tts_client.__version__
    server = _wheel(dists, "orpheus_svc", sv)
    meta = _metadata(server, "orpheus_svc", sv)
    assert meta["Version"] == sv and meta["License-Expression"] == "Apache-2.0"
    requires = meta.get_all("Requires-Dist")
    assert any(r.startswith("orpheus-tts-client") and 'extra == "server"' in r for r in requires)
    assert not any(r.startswith(("grpcio", "orpheus-tts-client")) and "extra" not in r
                   for r in requires), "the base install must stay free of the server stack"
    entry = server.read(f"orpheus_svc-{sv}.dist-info/entry_points.txt").decode()
    assert "orpheus-svc = orpheus_svc.app.cli:main" in entry
    client = _wheel(dists, "orpheus_tts_client", cv)
    assert _metadata(client, "orpheus_tts_client", cv)["Version"] == cv
    assert "orpheus-say = orpheus_tts_client.cli:main" in \
        client.read(f"orpheus_tts_client-{cv}.dist-info/entry_points.txt").decode()


@pytest.mark.parametrize("sdist, version, banned", [
    ("orpheus_svc", orpheus_svc.__version__, ("tests/", "bench/results/", "clients/", "deploy/")),
    ("orpheus_tts_client", orpheus_tts_client.__version__, ("tests/",)),
])
def test_sdists_hold_sources_not_tests_or_results(dists, sdist, version, banned):
    path = dists / f"{sdist}-{version}.tar.gz"
    with tarfile.open(path) as tar:
        names = [n.split("/", 1)[1] for n in tar.getnames() if "/" in n]
    assert "pyproject.toml" in names and "README.md" in names
    assert not [n for n in names if n.startswith(banned)]


def test_twine_check_passes_for_all_four(dists):
    files = sorted(str(p) for p in dists.iterdir() if p.suffix in (".whl", ".gz"))
    assert len(files) == 4, files
    run = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *files],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.count("PASSED") == 4
