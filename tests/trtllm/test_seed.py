"""A client's seed is never dropped silently: where TensorRT-LLM would ignore it (its PyTorch
runtime in the 1.2 line), the request is refused at the edge with the reason and the version."""

import dataclasses

import pytest

from orpheus_svc.config import Config, EngineConfig
from orpheus_svc.core.request import SamplingParams
from orpheus_svc.engine.handle import EventRouter
from orpheus_svc.engine.trtllm.manifest import FORMAT_CHECKPOINT, FORMAT_ENGINE
from orpheus_svc.runtime import FrontRuntime, build_runtime
from orpheus_svc.synth import SynthesisError, synthesize

from . import fake_trtllm
from .test_startup import _artifact


def _front(seed_refusal):
    return FrontRuntime(config=Config(), engine=None, router=EventRouter(),
                        encode=lambda text: [40, 41], model_name="m", is_demo=False,
                        device="cpu", seed_refusal=seed_refusal)


def test_the_edge_refuses_a_seed_the_engine_would_ignore_and_takes_one_it_honours():
    with pytest.raises(ValueError, match=r"^sampling.seed: TorchSampler ignores it$"):
        _front("TorchSampler ignores it").request("s", 0, "tara", "Hi.", SamplingParams(seed=1))
    assert _front("TorchSampler ignores it").request("s", 0, "tara", "Hi.").sampling.seed is None
    assert _front(None).request("s", 0, "tara", "Hi.", SamplingParams(seed=1)).sampling.seed == 1


@pytest.mark.parametrize("fmt,refused", [(FORMAT_CHECKPOINT, True), (FORMAT_ENGINE, False)])
def test_the_runtime_takes_the_refusal_from_the_trtllm_plan(tmp_path, monkeypatch, fmt, refused):
    fake_trtllm.install(monkeypatch)
    engine = dataclasses.replace(EngineConfig(), backend="trtllm",
                                 trtllm_engine_dir=_artifact(tmp_path, fmt=fmt))
    runtime = build_runtime(dataclasses.replace(Config(), engine=engine))
    try:
        assert (runtime.seed_refusal is not None) is refused
        if refused:  # offline synthesis takes the session's path, as gRPC and HTTP do
            with pytest.raises(SynthesisError, match=r"segment 0: sampling.seed: TensorRT-LLM "
                                                     r"1\.2\.0 does not honour a per-request"):
                synthesize(runtime, "Hello there.", seed=4, progress=False)
    finally:
        runtime.engine.backend.close()
