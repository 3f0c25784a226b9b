"""A seeded row keeps its bits on every CPU kernel path this machine has, not only on the one
torch picks by default: tests/engine/invariance_probe.py in fresh processes (the kernel
path is chosen when torch loads) under each ATEN_CPU_CAPABILITY the processor supports
(the first below its own with MKL and oneDNN held to AVX2 too), each under one and two
torch threads.

Each process checks the matmul self-check, seeded decode rows and prompts at every place of
batches of 1-64 and 257 on the torch backend and the graph engine's CPU path (logits bits
and tokens), and a seeded session's PCM through the flusher. torch's own path sweeps every
batch size on the torch backend at two threads; the rest take a spread of them (1, 2, 3,
7, 16, 17, 33, 64, 257) to stay cheap, and the graph engine's CPU path runs under torch's
own path at two threads only (it multiplies through the same rows_matmul).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def _capabilities() -> list[str]:
    """The ATEN_CPU_CAPABILITY values this processor can run (torch's names)."""
    best = torch.backends.cpu.get_cpu_capability().lower()
    order = ["default", "avx2", "avx512"]
    return order[:order.index(best) + 1] if best in order else ["default"]


def _paths() -> list[tuple[str, dict[str, str], list[str]]]:
    """(name, environment, probe arguments) of every kernel path to run: torch's own on
    both backends (the graph engine at two threads; every batch size on the torch backend
    there), each other ATEN_CPU_CAPABILITY the processor has on the torch backend (the graph
    engine's CPU path multiplies through the same rows_matmul), the first of them with MKL
    and oneDNN held to AVX2 as well (their kernels are paths of their own)."""
    paths = [("torch's own", {}, ["--full", "2", "--graph-threads", "2"])]
    own = torch.backends.cpu.get_cpu_capability().lower()
    for k, cap in enumerate(c for c in _capabilities() if c != own):
        env = {"ATEN_CPU_CAPABILITY": cap}
        if k == 0:
            env.update(MKL_ENABLE_INSTRUCTIONS="AVX2", ONEDNN_MAX_CPU_ISA="AVX2")
        paths.append((", ".join(f"{k}={v}" for k, v in env.items()), env,
                      ["--backends", "torch"]))
    if len(paths) == 1:  # a processor without AVX2: MKL and oneDNN's own paths still vary
        paths.append(("MKL and oneDNN at AVX2", {"MKL_ENABLE_INSTRUCTIONS": "AVX2",
                                                 "ONEDNN_MAX_CPU_ISA": "AVX2"},
                      ["--backends", "torch"]))
    return paths


def _probe(path: tuple[str, dict[str, str], list[str]]) -> tuple[str, subprocess.CompletedProcess]:
    name, env, args = path
    # passive OpenMP waits: two probes share two cores (the kernels are the same)
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", **env}
    run = subprocess.run([sys.executable, "-m", "tests.engine.invariance_probe", *args],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    return name, run


def test_a_seeded_row_keeps_its_bits_on_every_cpu_kernel_path():
    paths = _paths()
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(_probe, paths))
    for name, run in results:
        assert run.returncode in (0, 1), f"{name}: the probe crashed:\n{run.stderr[-3000:]}"
        doc = json.loads(run.stdout.strip().splitlines()[-1])
        assert [r["threads"] for r in doc["runs"]] == [1, 2], name
        for r in doc["runs"]:
            where = f"{name}, {r['threads']} thread(s)"
            assert r["matmul"], f"{where}: the matmul self-check failed"
            for part in ("torch", "graph", "codec"):
                assert not r.get(part, {}).get("failures"), (where, r[part]["failures"][:10])
            assert r["torch"]["rows"] > 500
        assert doc["ok"] and run.returncode == 0
    own = json.loads(results[0][1].stdout.strip().splitlines()[-1])["runs"]
    assert results[0][0] == "torch's own" and own[1]["graph"]["rows"] > 500
    assert own[1]["torch"]["rows"] > 4000  # every batch size 1-64 and 257
    assert len(results) >= 2
