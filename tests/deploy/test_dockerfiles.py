"""What the Dockerfiles copy and install, checked without building (issue 26): every COPY
source exists (the wheels as `python -m build` names them), each Dockerfile's .dockerignore
lets it through, and the packages installed are our two wheels from that COPY, not the
checkout. scripts/image-check.sh assembles the same contexts with the same code and builds
the CPU image; the GPU image's NVIDIA base cannot be had here, so for it this is the check."""

import fnmatch
import importlib.util
import re
from pathlib import Path

import pytest

import orpheus_svc
import orpheus_tts_client

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "deploy" / "docker"
_spec = importlib.util.spec_from_file_location(
    "docker_context", ROOT / "scripts" / "release" / "docker_context.py")
docker_context = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(docker_context)

WHEELS = (f"orpheus_svc-{orpheus_svc.__version__}-py3-none-any.whl",
          f"orpheus_tts_client-{orpheus_tts_client.__version__}-py3-none-any.whl")


@pytest.fixture
def wheel_dir(tmp_path):
    for name in WHEELS:
        (tmp_path / name).write_bytes(b"")
    return tmp_path


@pytest.mark.parametrize("name", ["Dockerfile", "Dockerfile.cpu"])
def test_every_copy_source_exists_and_the_context_holds_our_two_wheels(name, wheel_dir, tmp_path):
    copied = docker_context.assemble(DOCKER / name, wheel_dir, tmp_path / "ctx")
    assert sorted(c for c in copied if c.startswith("dist/")) == sorted(f"dist/{w}" for w in WHEELS)
    assert all((tmp_path / "ctx" / c).exists() for c in copied)


def test_a_stale_second_wheel_in_dist_is_refused(wheel_dir, tmp_path):
    (wheel_dir / "orpheus_svc-0.0.1-py3-none-any.whl").write_bytes(b"")
    with pytest.raises(SystemExit, match="one orpheus_svc-"):
        docker_context.assemble(DOCKER / "Dockerfile.cpu", wheel_dir, tmp_path / "ctx")


@pytest.mark.parametrize("name", ["Dockerfile", "Dockerfile.cpu"])
def test_the_dockerignore_lets_every_copy_source_through(name):
    rules = [line.strip() for line in (DOCKER / f"{name}.dockerignore").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    for source in docker_context.copy_sources(DOCKER / name):
        included = False
        for rule in rules:  # the last matching rule wins, as in Docker
            negate = rule.startswith("!")
            if fnmatch.fnmatch(source, rule.lstrip("!")):
                included = negate
        assert included, f"{name}.dockerignore excludes COPY {source}"


@pytest.mark.parametrize("name", ["Dockerfile", "Dockerfile.cpu"])
def test_the_image_installs_the_wheels_not_the_checkout(name):
    text = (DOCKER / name).read_text()
    sources = docker_context.copy_sources(DOCKER / name)
    assert "dist/*.whl" in sources
    assert not {"orpheus_svc", "clients/python", "pyproject.toml", "."} & set(sources)
    assert re.search(r"COPY dist/\*\.whl /tmp/wheels/", text)
    assert re.search(r"pip install --no-cache-dir --no-deps /tmp/wheels/\*\.whl", text)


_rspec = importlib.util.spec_from_file_location(
    "record_image_check", ROOT / "scripts" / "release" / "record_image_check.py")
record_image_check = importlib.util.module_from_spec(_rspec)
_rspec.loader.exec_module(record_image_check)


@pytest.mark.parametrize("base_s, shown", [("90", "| 90 s (0 when reused) |"), ("0", "| reused (0 s) |")])
def test_the_image_check_record_keeps_every_row_whole(base_s, shown):
    values = {"date": "2026-11-27", "version": "0.1.0", "tools": "buildah 1", "base_s": base_s,
              "build_s": "177", "deps": "deps abc built in 171 s", "size": "5.7GB",
              "size_bytes": "1", "layers": "7", "uid": "10001", "serving_s": "10", "storage": "5.8G"}
    lines = record_image_check.render(values).splitlines()
    table = [line for line in lines if line.startswith("|")]
    assert all(line.endswith("|") and line.count("|") == 3 for line in table), table
    assert any(line.startswith("| base image (debootstrap") and line.endswith(shown) for line in table)
    assert any("**177 s** (deps abc built in 171 s)" in line for line in table)
    assert any("in 7 layers" in line for line in table)
