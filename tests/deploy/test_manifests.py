"""deploy/: the server config the Kubernetes manifests ship loads with the server's own loader,
and the command lines in the manifests and Dockerfiles are valid `orpheus-svc` flags.

The Kubernetes objects themselves are decoded strictly into the API types, and the overlays
rendered, by the Go module deploy/k8s/validate; this side covers what needs orpheus_svc.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

from orpheus_svc.app import cli
from orpheus_svc.config import Config, load_config

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
DOCKER = ROOT / "deploy" / "docker"
KUSTOMIZATIONS = {"base": K8S / "base", "gpu": K8S / "overlays" / "gpu",
                  "cpu-demo": K8S / "overlays" / "cpu-demo"}
# The KEDA overlays are a sibling above plus components/keda: the sibling's config and pod,
# another autoscaler. They have no config of their own, but render to a pod like any other.
RENDERED = {**KUSTOMIZATIONS, "gpu-keda": K8S / "overlays" / "gpu-keda",
            "cpu-demo-keda": K8S / "overlays" / "cpu-demo-keda"}
# Time to stop the engine and flusher after the last call, on top of drain + grace.
SHUTDOWN_MARGIN_S = 5


def _generator_files() -> list[Path]:
    """Every file a configMapGenerator under deploy/k8s names."""
    out = []
    for kfile in sorted(K8S.rglob("kustomization.yaml")):
        k = yaml.safe_load(kfile.read_text())
        for gen in k.get("configMapGenerator") or []:
            for src in gen.get("files") or []:
                out.append(kfile.parent / src.split("=", 1)[-1])
    return out


def _parse_serve(argv: list[str]):
    """argparse's namespace for an `orpheus-svc ...` command line; fails the test on bad flags."""
    assert argv and Path(argv[0]).name == "orpheus-svc", f"not an orpheus-svc command: {argv}"
    try:
        args = cli.build_parser().parse_args(argv[1:])
    except SystemExit as exc:  # argparse's way of refusing
        pytest.fail(f"orpheus-svc rejects {argv[1:]} (exit {exc.code})")
    assert args.command == "serve", argv
    return args


def _orpheus_env(container: dict) -> dict[str, str]:
    env = {}
    for item in container.get("env") or []:
        if item["name"].startswith("ORPHEUS_"):
            assert "value" in item, f"{item['name']} must be a literal value to be checked"
            env[item["name"]] = item["value"]
    return env


def test_every_configmap_config_loads_with_the_server_loader():
    files = _generator_files()
    assert len(files) == len(KUSTOMIZATIONS), files  # one config per kustomization
    for path in files:
        config = load_config(path, environ={})
        assert isinstance(config, Config)
        assert config.server.host == "0.0.0.0", f"{path}: kubelet probes the pod IP"
        assert config.server.metrics_port == 9090, path


def test_gpu_config_serves_the_trtllm_artifact_and_cpu_demo_the_demo_model():
    gpu = load_config(K8S / "overlays" / "gpu" / "config.yaml", environ={})
    assert gpu.engine.backend == "trtllm" and gpu.model.device == "cuda"
    assert gpu.engine.trtllm_engine_dir and gpu.model.snac  # real weights, from the volume
    assert gpu.engine.max_batch_size >= gpu.engine.max_sessions  # trtllm backend's rule
    demo = load_config(K8S / "overlays" / "cpu-demo" / "config.yaml", environ={})
    assert demo.engine.backend == "torch" and demo.model.device == "cpu"
    assert demo.model.path is None  # the embedded demo checkpoint


def test_a_bad_setting_in_a_shipped_config_would_be_caught(tmp_path):
    # the loader refuses unknown keys, so the test above cannot pass on a misspelt config
    bad = tmp_path / "config.yaml"
    text = (K8S / "base" / "config.yaml").read_text().replace("grace_seconds", "grace_second")
    bad.write_text(text)
    with pytest.raises(ValueError, match="grace_second"):
        load_config(bad, environ={})


def test_source_manifests_command_lines_are_valid_serve_flags():
    seen = 0
    for path in sorted(K8S.rglob("*.yaml")):
        if path.name == "kustomization.yaml" or path in _generator_files():
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "Deployment":
                continue
            for c in doc["spec"]["template"]["spec"].get("containers") or []:
                if "command" in c or "args" in c:
                    _parse_serve((c.get("command") or ["orpheus-svc"]) + (c.get("args") or []))
                    seen += 1
    assert seen >= 1


def _exec_form(dockerfile: Path, instruction: str) -> list[str]:
    """The JSON (exec) form of the last ENTRYPOINT or CMD of a Dockerfile."""
    found = re.findall(rf"^{instruction}\s+(\[.*\])\s*$", dockerfile.read_text(), re.M)
    assert found, f"{dockerfile.name}: no {instruction} in exec form"
    return json.loads(found[-1])


@pytest.mark.parametrize("name", ["Dockerfile", "Dockerfile.cpu"])
def test_dockerfile_entrypoint_and_cmd_are_a_valid_serve_command(name):
    dockerfile = DOCKER / name
    argv = _exec_form(dockerfile, "ENTRYPOINT") + _exec_form(dockerfile, "CMD")
    args = _parse_serve(argv)
    assert not args.config or args.config.startswith("/etc/orpheus/")
    assert re.search(r"^USER\s+(?!0\b|root\b)\S+", dockerfile.read_text(), re.M), "runs as root"


# -- rendered overlays ------------------------------------------------------------------


def _kustomize() -> str:
    local = ROOT / ".tools" / "bin" / "kustomize"
    found = str(local) if local.exists() else shutil.which("kustomize")
    if not found:
        pytest.skip("kustomize not installed: run scripts/install-tools.sh")
    return found


def test_every_overlay_is_rendered_here():
    overlays = {p for p in (K8S / "overlays").iterdir() if p.is_dir()}
    missing = sorted(overlays - set(RENDERED.values()))
    assert not missing, f"add to RENDERED: {missing}"


@pytest.mark.parametrize("name", list(RENDERED))
def test_rendered_deployment_runs_a_config_that_fits_its_pod(name, tmp_path):
    """Render with kustomize, then load the config exactly as the container would (the
    ConfigMap's file via --config, ORPHEUS_* env, flags) and hold the pod spec against it."""
    out = subprocess.run([_kustomize(), "build", str(RENDERED[name])], check=True,
                         capture_output=True, text=True).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    (deploy,) = [d for d in docs if d["kind"] == "Deployment"]
    configmaps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
    pod = deploy["spec"]["template"]["spec"]
    (c,) = [c for c in pod["containers"] if c["name"] == "orpheus-svc"]
    args = _parse_serve(c["command"] + c["args"])

    # --config PATH -> the ConfigMap volume mounted over it
    mounts = {m["mountPath"].rstrip("/"): m for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    cfg_dir, key = args.config.rsplit("/", 1)
    cm_name = volumes[mounts[cfg_dir]["name"]]["configMap"]["name"]
    cfg_file = tmp_path / key
    cfg_file.write_text(configmaps[cm_name]["data"][key])
    config = load_config(cfg_file, overrides=cli._overrides(args), environ=_orpheus_env(c))

    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert config.server.port == ports["grpc"]
    assert config.server.metrics_port == ports["metrics"]
    assert config.server.http_port == ports["http"]  # the HTTP edge; probes stay on gRPC
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["grpc"]["port"] == config.server.port, probe
    need = math.ceil(config.server.drain_delay_seconds + config.server.grace_seconds)
    assert pod["terminationGracePeriodSeconds"] >= need + SHUTDOWN_MARGIN_S

    # every file the config reads lies on a volume mounted into the container
    for setting in (config.model.path, config.model.snac, config.engine.trtllm_engine_dir):
        if setting and setting.startswith("/"):
            assert any(setting == m or setting.startswith(m + "/") for m in mounts), \
                f"{setting} is not on a mounted volume ({sorted(mounts)})"
    if config.engine.backend == "trtllm":
        assert c["resources"]["limits"].get("nvidia.com/gpu") == 1


# -- image dependencies ---------------------------------------------------------------------

# The GPU image keeps these from NVIDIA's TensorRT-LLM image (deploy/docker/Dockerfile).
GPU_BASE_PROVIDES = {"torch", "numpy", "safetensors", "tokenizers", "huggingface-hub", "pyyaml",
                     "tqdm"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep, f"{path.name}: {line!r} is not pinned with =="
            pins[_norm(name)] = version
    return pins


def _server_requirements() -> list[Requirement]:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    # the images serve: the server extra is a runtime dependency for them
    reqs += [Requirement(r) for r in project["optional-dependencies"]["server"]]
    # the client distribution is installed from ./clients/python; its own needs count too
    client = tomllib.loads((ROOT / "clients" / "python" / "pyproject.toml").read_text())["project"]
    reqs += [Requirement(r) for r in client["dependencies"]]
    return [r for r in reqs if _norm(r.name) != "orpheus-tts-client"]


def test_images_pin_every_runtime_dependency_within_pyproject_ranges():
    # The images install orpheus-svc with --no-deps, so a dependency added to pyproject.toml
    # but not to the image's requirements would only show when the container starts.
    cpu = _pins(DOCKER / "requirements-cpu.txt")
    gpu = _pins(DOCKER / "requirements-gpu.txt")
    gpu_dockerfile = (DOCKER / "Dockerfile").read_text()
    gpu_extra = dict(re.findall(r"--no-deps (snac)==([\w.]+)", gpu_dockerfile))
    assert gpu_extra, "the GPU Dockerfile no longer pins snac"
    for req in _server_requirements():
        name = _norm(req.name)
        if name != "torch":  # the CPU image installs torch from its own index (TORCH_VERSION)
            assert name in cpu, f"{req} is missing from requirements-cpu.txt"
            assert req.specifier.contains(cpu[name], prereleases=True), \
                f"requirements-cpu.txt pins {name}=={cpu[name]}, pyproject wants {req}"
        if name in GPU_BASE_PROVIDES:
            continue
        version = gpu.get(name) or gpu_extra.get(name)
        assert version, f"{req} is missing from requirements-gpu.txt"
        assert req.specifier.contains(version, prereleases=True), \
            f"the GPU image pins {name}=={version}, pyproject wants {req}"
