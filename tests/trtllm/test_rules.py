"""plan_llm: TensorRT-LLM's rules for the configured combination, checked in one place."""

import dataclasses

import pytest

from orpheus_svc.config import ConfigError, EngineConfig, load_config
from orpheus_svc.engine.trtllm.manifest import FORMAT_CHECKPOINT, FORMAT_ENGINE, Limits, Manifest
from orpheus_svc.engine.trtllm.rules import plan_llm
from orpheus_svc.engine.trtllm.startup import TrtllmStartupError


def _manifest(fmt=FORMAT_CHECKPOINT, batch=32, seq=4096, num_tokens=8192):
    return Manifest(format=fmt, model="m", precision={}, limits=Limits(batch, seq, num_tokens))


def _engine(**kw):
    return dataclasses.replace(EngineConfig(), backend="trtllm", trtllm_engine_dir="/e", **kw)


@pytest.mark.parametrize("mask,setting,overlap", [
    (True, "auto", False), (True, "off", False), (False, "auto", True), (False, "on", True),
    (False, "off", False), (False, "True", True), (True, "False", False),
])
def test_the_overlap_scheduler_follows_the_mask_unless_told(mask, setting, overlap):
    plan = plan_llm(_manifest(), _engine(trtllm_grammar_mask=mask,
                                         trtllm_overlap_scheduler=setting))
    assert plan.overlap_scheduler is overlap
    assert plan.llm_kwargs["disable_overlap_scheduler"] is (not overlap)
    assert bool(plan.notes) is (mask and not overlap)  # says so when it switched it off


def test_every_problem_is_named_at_once():
    with pytest.raises(TrtllmStartupError) as err:
        plan_llm(_manifest(num_tokens=16), _engine(trtllm_overlap_scheduler="on",
                                                   max_sessions=32, max_seq_len=4096))
    msg = str(err.value)
    assert "engine.trtllm_grammar_mask is true and engine.trtllm_overlap_scheduler is on" in msg
    assert "admits prompts of up to 4088 tokens, but the artifact's max_num_tokens is 16" in msg
    assert "max_num_tokens 16 < engine.max_sessions 32" in msg


def test_a_tensorrt_engine_keeps_its_compiled_limits_and_gets_no_pytorch_arguments():
    plan = plan_llm(_manifest(FORMAT_ENGINE), _engine())
    assert plan.runtime == "tensorrt" and plan.llm_kwargs == dict(skip_tokenizer_init=True,
                                                                  enable_chunked_prefill=False)
    with pytest.raises(TrtllmStartupError, match="max_sessions 64 > the engine's max_batch_size"):
        plan_llm(_manifest(FORMAT_ENGINE), _engine(max_sessions=64))


def test_the_yaml_spelling_of_on_is_accepted_and_nonsense_is_refused(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("engine:\n  backend: trtllm\n  trtllm_overlap_scheduler: on\n")
    e = load_config(cfg, environ={}).engine
    with pytest.raises(TrtllmStartupError, match="engine.trtllm_overlap_scheduler is on"):
        plan_llm(_manifest(), e)
    cfg.write_text("engine:\n  trtllm_overlap_scheduler: sometimes\n")
    with pytest.raises(ConfigError, match="engine.trtllm_overlap_scheduler"):
        load_config(cfg, environ={})
