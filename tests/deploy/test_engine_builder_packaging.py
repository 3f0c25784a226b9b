"""engine_builder installs and runs without the server's stack (issue 12): `pip install
'orpheus-svc[build]'` pulls in no gRPC, Prometheus, HTTP edge or client, and nothing the
builder imports reaches them (checked in a fresh interpreter that refuses those imports)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVER_STACK = ("grpc", "grpc_health", "grpc_reflection", "google.protobuf", "prometheus_client",
                "orpheus_tts_client", "starlette", "uvicorn", "websockets")
SERVER_DISTS = {"grpcio", "grpcio-health-checking", "grpcio-reflection", "protobuf",
                "prometheus-client", "orpheus-tts-client", "starlette", "uvicorn", "websockets"}


def _name(requirement: str) -> str:
    return re.split(r"[<>=~!\[; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_the_builder_s_install_declares_no_server_dependency():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    builder = project["dependencies"] + project["optional-dependencies"]["build"]
    assert not {_name(r) for r in builder} & SERVER_DISTS
    assert SERVER_DISTS <= {_name(r) for r in project["optional-dependencies"]["server"]}
    # scripts/install.sh installs the server extra, and the command keeps its name
    assert project["scripts"]["orpheus-build-engine"] == "engine_builder.cli:main"
    assert "'.[server,dev]'" in (ROOT / "scripts" / "install.sh").read_text()


_PROBE = r"""
import importlib, pkgutil, sys
BLOCKED = {blocked!r}

class Refuse:
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in BLOCKED):
            raise ImportError(f"engine_builder reached the server stack: {{name}}")

sys.meta_path.insert(0, Refuse())
import engine_builder
for mod in pkgutil.walk_packages(engine_builder.__path__, "engine_builder."):
    importlib.import_module(mod.name)
from engine_builder.cli import main
from orpheus_svc.engine.trtllm.gpu import GpuInfo
code = main(["--model", "canopylabs/orpheus-3b-0.1-ft", "--out", "/tmp/orpheus-fp8", "--dry-run"],
            gpu_probe=lambda: GpuInfo("NVIDIA H100 80GB HBM3", (9, 0)))
leaked = sorted(m for m in sys.modules if any(m == b or m.startswith(b + ".") for b in BLOCKED))
print("exit", code, "leaked", leaked)
"""


def test_no_server_import_is_reachable_from_engine_builder():
    probe = _PROBE.format(blocked=SERVER_STACK)
    run = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "exit 0 leaked []" in run.stdout, run.stdout + run.stderr[-2000:]
