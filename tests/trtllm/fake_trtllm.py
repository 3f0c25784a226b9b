"""A STAND-IN `tensorrt_llm` package for the real build_trtllm_backend path. Not TensorRT-LLM.

install(monkeypatch) puts modules named tensorrt_llm, tensorrt_llm.llmapi and
tensorrt_llm._tensorrt_engine into sys.modules with the names the backend uses (LLM,
SamplingParams, llmapi.KvCacheConfig, _tensorrt_engine.LLM). Each LLM(...) call builds a
StandInLLM that keeps its keyword arguments and streams through ExecutorReplay with the
timing those arguments ask for: the PyTorch LLM runs its overlap scheduler unless
disable_overlap_scheduler=True (TensorRT-LLM's default is on); the TensorRT engine LLM
has none. The GPU probe is replaced too, and records whether it was reached, and so is the version
lookup in the package metadata (it answers the stand-in's __version__).
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field

from orpheus_svc.engine.trtllm.gpu import GpuInfo

from .driver import Params
from .replay import ExecutorReplay
from .standin import StandInLLM


@dataclass
class FakeTrtllm:
    llms: list[StandInLLM] = field(default_factory=list)
    runtimes: list[str] = field(default_factory=list)
    gpu_probes: int = 0

    def _make(self, runtime: str, **kwargs) -> StandInLLM:
        overlap = runtime == "pytorch" and not kwargs.get("disable_overlap_scheduler", False)
        llm = StandInLLM(script=ExecutorReplay(overlap=overlap), llm_kwargs=kwargs)
        self.llms.append(llm)
        self.runtimes.append(runtime)
        return llm


def install(monkeypatch) -> FakeTrtllm:
    fake = FakeTrtllm()
    root = types.ModuleType("tensorrt_llm")
    root.__version__ = "1.2.0"
    root.LLM = lambda **kw: fake._make("pytorch", **kw)
    root.SamplingParams = Params
    llmapi = types.ModuleType("tensorrt_llm.llmapi")
    llmapi.KvCacheConfig = lambda **kw: ("KvCacheConfig", kw)
    engine = types.ModuleType("tensorrt_llm._tensorrt_engine")
    engine.LLM = lambda **kw: fake._make("tensorrt", **kw)
    root.llmapi, root._tensorrt_engine = llmapi, engine
    for name, mod in (("tensorrt_llm", root), ("tensorrt_llm.llmapi", llmapi),
                      ("tensorrt_llm._tensorrt_engine", engine)):
        monkeypatch.setitem(sys.modules, name, mod)

    def gpu():
        fake.gpu_probes += 1
        return GpuInfo("stand-in H100", (9, 0))

    monkeypatch.setattr("orpheus_svc.engine.trtllm.build.require_fp8_gpu", gpu)
    monkeypatch.setattr("orpheus_svc.engine.trtllm.build.installed_version",
                        lambda: root.__version__)
    return fake
