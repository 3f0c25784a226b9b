"""Our logits processor must load in TensorRT-LLM's worker process (a fresh interpreter
with our environment, which unpickles each request): checked and arranged at start-up."""

import os
import pickle
import subprocess
import sys

import pytest

from orpheus_svc.engine.trtllm.grammar import AudioGrammarLogitsProcessor
from orpheus_svc.engine.trtllm.processor import request_processor
from orpheus_svc.engine.trtllm.startup import TrtllmStartupError
from orpheus_svc.engine.trtllm.worker import ensure_worker_can_import


def test_the_installed_package_needs_nothing():
    env = dict(os.environ)
    assert ensure_worker_can_import(AudioGrammarLogitsProcessor.__module__, env) is None
    assert env == dict(os.environ)


def test_a_package_found_only_through_this_process_goes_on_pythonpath(tmp_path, monkeypatch):
    root = tmp_path / "src"
    (root / "probe_pkg_issue11").mkdir(parents=True)
    (root / "probe_pkg_issue11" / "__init__.py").write_text("")
    (root / "probe_pkg_issue11" / "grammar.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(root))  # like running the server from a source tree
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = "/elsewhere"
    added = ensure_worker_can_import("probe_pkg_issue11.grammar", env)
    assert added == str(root)
    assert env["PYTHONPATH"] == os.pathsep.join([str(root), "/elsewhere"])
    fresh = subprocess.run([sys.executable, "-c", "import probe_pkg_issue11.grammar"],
                           cwd=tmp_path, env=env, capture_output=True)
    assert fresh.returncode == 0, fresh.stderr


def test_a_worker_that_still_cannot_import_it_stops_start_up_with_the_reason():
    def failing(*args, **kwargs):
        return subprocess.CompletedProcess(args, 1, "", "ModuleNotFoundError: no torch here")

    with pytest.raises(TrtllmStartupError) as err:
        ensure_worker_can_import(AudioGrammarLogitsProcessor.__module__, {}, run=failing)
    msg = str(err.value)
    # No setting helps: the repetition penalty goes with every request, mask or not.
    assert "no torch here" in msg and "Install orpheus-svc into the environment" in msg
    assert "engine.trtllm_grammar_mask" not in msg


def test_the_processor_unpickles_and_masks_in_a_fresh_interpreter(tmp_path):
    code = ("import pickle, sys, torch\n"
            "p = pickle.loads(sys.stdin.buffer.read())\n"
            "logits = torch.zeros(1, 1, 156940)\n"
            "p(1, logits, [[128259, 128257]], None, None)\n"
            "print(int(torch.isfinite(logits).sum()))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          input=pickle.dumps(AudioGrammarLogitsProcessor()))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.decode().strip() == "4096"  # position 0's codes only


def test_the_request_processor_unpickles_penalises_and_masks_in_a_fresh_interpreter(tmp_path):
    # What the worker gets for every request: the mask and a penalty of 2.0 with a 2-token
    # prompt; one frame generated whose position-0 code is 5, then position 0 again.
    frame = [128266 + 5] + [128266 + p * 4096 for p in range(1, 7)]
    code = ("import pickle, sys, torch\n"
            "p = pickle.loads(sys.stdin.buffer.read())\n"
            "logits = torch.ones(1, 1, 156940)\n"
            f"p(1, logits, [[128259, 128257] + {frame}], None, None)\n"
            "finite = torch.isfinite(logits[0, 0])\n"
            "print(int(finite.sum()), logits[0, 0, 128266 + 5].item(), "
            "logits[0, 0, 128258].item())\n")
    processor = request_processor(2, 2.0, AudioGrammarLogitsProcessor())
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          input=pickle.dumps(processor))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.decode().split() == ["4097", "0.5", "1.0"]  # + stop; 1 / 2.0
