"""Our logits processor crosses into TensorRT-LLM's worker process; make sure it can land.

Read from TensorRT-LLM's source (paths in docs/tensorrt-llm.md): on one GPU, tensorrt_llm.LLM
runs its executor in a separate worker process (GenerationExecutorProxy starts it through
mpi4py), and every request (GenerationRequest with its SamplingParams, logits_processor
included) is pickled by the proxy and unpickled by that worker from a ZeroMQ queue
(HMAC-signed plain pickle). So:

  * the processor's class is imported by module path in the worker: the worker must be
    able to import orpheus_svc.engine.trtllm.processor (and with it the grammar mask
    and the repetition penalty). It is started by a fresh
    interpreter with this process's environment, so what this process found through its
    working directory or a sys.path edit is not necessarily there. ensure_worker_can_import
    checks exactly that (a fresh interpreter, an empty working directory, our environment)
    and, if needed, puts the package root on PYTHONPATH before the LLM starts its worker;
  * serialization.register_approved_ipc_class is no help: it appends to a module-level
    dict in the calling process only (the worker has its own copy), and the request
    queue does not consult that list. The backend therefore does not call it.
"""

from __future__ import annotations

import importlib
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, MutableMapping

from orpheus_svc.engine.trtllm.startup import TrtllmStartupError

log = logging.getLogger(__name__)

Run = Callable[..., subprocess.CompletedProcess]


def ensure_worker_can_import(module: str, env: MutableMapping[str, str] | None = None,
                             run: Run = subprocess.run) -> str | None:
    """Make `module` importable by a fresh interpreter started with `env` (default: this
    process's environment, which TensorRT-LLM's worker inherits). Returns the directory
    added to PYTHONPATH, or None when nothing was needed; TrtllmStartupError if it cannot."""
    env = os.environ if env is None else env
    ok, err = _probe(module, env, run)
    if ok:
        return None
    top = importlib.import_module(module.split(".")[0])
    root = str(Path(top.__file__).resolve().parent.parent)
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([root, *parts])
    ok, err = _probe(module, env, run)
    if not ok:
        raise TrtllmStartupError(
            f"TensorRT-LLM's worker process could not import {module} (the logits "
            f"processor every request carries: repetition penalty and audio-grammar mask), "
            f"even with {root} on PYTHONPATH: {err}. Install orpheus-svc into the "
            f"environment that runs the server")
    log.info("added %s to PYTHONPATH so TensorRT-LLM's worker process can import %s",
             root, module)
    return root


def _probe(module: str, env: MutableMapping[str, str], run: Run) -> tuple[bool, str]:
    with tempfile.TemporaryDirectory() as empty:  # not the server's working directory
        proc = run([sys.executable, "-c", f"import {module}"], cwd=empty, env=dict(env),
                   capture_output=True, text=True, timeout=120)
    tail = (proc.stderr or "").strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
    return proc.returncode == 0, tail[0]
