"""plan_llm: TensorRT-LLM's rules for the configured combination, checked in one place."""

import dataclasses

import pytest

from orpheus_svc.config import ConfigError, EngineConfig, load_config
from orpheus_svc.engine.trtllm.manifest import FORMAT_CHECKPOINT, FORMAT_ENGINE, Limits, Manifest
from orpheus_svc.engine.trtllm.rules import READ_FROM, plan_llm, seed_refusal_reason
from orpheus_svc.engine.trtllm.startup import TrtllmStartupError


def _manifest(fmt=FORMAT_CHECKPOINT, batch=32, seq=4096, num_tokens=8192):
    return Manifest(format=fmt, model="m", precision={}, limits=Limits(batch, seq, num_tokens))


def _engine(**kw):
    return dataclasses.replace(EngineConfig(), backend="trtllm", trtllm_engine_dir="/e", **kw)


@pytest.mark.parametrize("mask", [True, False])
@pytest.mark.parametrize("setting", ["auto", "off", "False"])
def test_the_overlap_scheduler_is_off_because_every_request_carries_a_processor(mask, setting):
    # The repetition penalty goes with every request, mask or not, and reads the last token.
    plan = plan_llm(_manifest(), _engine(trtllm_grammar_mask=mask,
                                         trtllm_overlap_scheduler=setting))
    assert plan.overlap_scheduler is False
    assert plan.llm_kwargs["disable_overlap_scheduler"] is True
    (note,) = [n for n in plan.notes if n.startswith("overlap scheduler disabled")]
    assert "repetition penalty" in note and ("audio-grammar mask" in note) is mask


@pytest.mark.parametrize("mask", [True, False])
@pytest.mark.parametrize("setting", ["on", "True"])
def test_the_overlap_scheduler_on_is_refused_with_or_without_the_mask(mask, setting):
    with pytest.raises(TrtllmStartupError) as err:
        plan_llm(_manifest(), _engine(trtllm_grammar_mask=mask, trtllm_overlap_scheduler=setting))
    msg = str(err.value)
    assert "engine.trtllm_overlap_scheduler is on" in msg and "repetition penalty" in msg
    assert ("engine.trtllm_grammar_mask" in msg) is mask


def test_every_problem_is_named_at_once():
    with pytest.raises(TrtllmStartupError) as err:
        plan_llm(_manifest(num_tokens=16), _engine(trtllm_overlap_scheduler="on",
                                                   max_sessions=32, max_seq_len=4096))
    msg = str(err.value)
    assert "engine.trtllm_overlap_scheduler is on" in msg
    assert "the audio-grammar mask (engine.trtllm_grammar_mask) would forbid" in msg
    assert "admits prompts of up to 4088 tokens, but the artifact's max_num_tokens is 16" in msg
    assert "max_num_tokens 16 < engine.max_sessions 32" in msg


def test_the_penalty_is_ours_on_both_runtimes_and_the_log_says_why():
    for fmt, why in ((FORMAT_CHECKPOINT, "ignores SamplingParams.repetition_penalty"),
                     (FORMAT_ENGINE, "would also penalise the prompt's ids")):
        (note,) = [n for n in plan_llm(_manifest(fmt), _engine(), "1.2.0").notes
                   if n.startswith("repetition penalty")]
        assert "applied by our logits processor" in note and why in note


def test_a_pytorch_runtime_refuses_seeds_naming_the_version_and_the_source():
    plan = plan_llm(_manifest(), _engine(), "1.2.1")
    refusal = plan.seed_refusal
    assert refusal.startswith("TensorRT-LLM 1.2.1 does not honour a per-request seed on its "
                              "PyTorch runtime: ")
    assert "TorchSampler.get_generator" in refusal and "PR #17172" in refusal
    assert any(n == "per-request seeds refused: " + refusal for n in plan.notes)


@pytest.mark.parametrize("version,says", [
    ("1.3.0", "(that is what the 1.2 line does; 1.3.0 was not read)"),
    (None, "TensorRT-LLM (version unknown) does not honour"),
])
def test_a_version_that_was_not_read_is_not_trusted_with_seeds(version, says):
    assert says in plan_llm(_manifest(), _engine(), version).seed_refusal
    assert seed_refusal_reason("pytorch", version) == plan_llm(_manifest(), _engine(),
                                                               version).seed_refusal


def test_a_tensorrt_engine_honours_seeds_and_says_where_that_was_read():
    plan = plan_llm(_manifest(FORMAT_ENGINE), _engine(), "1.2.0")
    assert plan.seed_refusal is None
    assert "per-request seeds honoured: " + READ_FROM["seed (TensorRT runtime)"] in plan.notes


def test_every_rule_names_what_it_was_read_from():
    assert {"features", "backend", "limits", "penalty", "seed"} <= set(READ_FROM)
    for rule, source in READ_FROM.items():
        assert "tensorrt_llm" in source, rule  # a file of TensorRT-LLM, not our guess


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
