"""EngineLoop.write_adapter (engine/loop.py): a LoRA pool slot is rewritten by the engine
thread itself, between steps, in the order of the command queue (after a cancel queued
before it, before a submit queued after it), and a write that fails fails alone."""

import threading
from types import SimpleNamespace

import pytest

from orpheus_svc.core.request import GenerationRequest, SamplingParams
from orpheus_svc.engine.loop import EngineLoop
from orpheus_svc.engine.sim.backend import SimBackend
from orpheus_svc.engine.sim.profiles import get_profile

from ..engine.harness import Collector, RecordingFlusher

PROMPT = (128259, 128000, 40, 41, 42, 128009, 128260, 128261, 128257)


class Recording(SimBackend):
    """The sim, recording what the engine asked of it, in order, and on which thread."""

    def __init__(self):
        super().__init__(get_profile("h100-fp8"), num_slots=4, max_seq_len=256,
                         max_adapters=2, lora_rank=8)
        self.log = []
        self.fail_next_write = False

    def step(self, plan):
        self.log.append(("step", threading.current_thread().name,
                         tuple((r.gen_id, r.request.adapter) for r in plan.prefill)))
        return super().step(plan)

    def write_adapter(self, slot, adapter):
        self.log.append(("write", threading.current_thread().name, slot))
        if self.fail_next_write:
            self.fail_next_write = False
            raise RuntimeError("device said no")
        super().write_adapter(slot, adapter)


def adapter(name="nova", rank=8):
    return SimpleNamespace(path=f"/adapters/{name}", spec=SimpleNamespace(r=rank))


@pytest.fixture
def engine():
    events = Collector()
    backend = Recording()
    core = EngineLoop(backend, RecordingFlusher(events), events)
    core.start()
    try:
        yield core, backend, events
    finally:
        core.stop()


def _req(adapter_slot=-1, max_tokens=70):
    return GenerationRequest("s", 0, PROMPT, max_tokens, SamplingParams(seed=1),
                             adapter=adapter_slot)


def test_a_slot_is_written_on_the_engine_thread_before_the_submits_queued_after_it(engine):
    core, backend, events = engine
    running = core.submit(_req(max_tokens=700))  # steps run meanwhile
    events.wait_for(lambda ev: any(k == "step" for k, *_ in backend.log))
    core.write_adapter(1, adapter()).result(timeout=30)
    user = core.submit(_req(adapter_slot=1))
    events.wait_for(lambda ev: events.ended([user]))
    core.cancel(running)
    writes = [e for e in backend.log if e[0] == "write"]
    assert writes == [("write", "engine-core", 1)] and backend.pool == {1: ("/adapters/nova", 8)}
    first_use = next(i for i, e in enumerate(backend.log)
                     if e[0] == "step" and (user, 1) in e[2])
    assert backend.log.index(writes[0]) < first_use
    # between steps: the thread that steps is the one that wrote
    assert {e[1] for e in backend.log} == {"engine-core"}


def test_clearing_a_slot_and_the_queue_order_with_a_cancel(engine):
    core, backend, events = engine
    core.write_adapter(0, adapter()).result(timeout=30)
    gen = core.submit(_req(adapter_slot=0, max_tokens=700))
    events.wait_for(lambda ev: any(e[0] == "step" and (gen, 0) in e[2] for e in backend.log))
    core.cancel(gen)  # the session ended ...
    cleared = core.write_adapter(0, None)  # ... so its adapter's slot is freed
    cleared.result(timeout=30)
    assert backend.pool == {}
    events.wait_for(lambda ev: events.ended([gen]))


def test_a_bad_slot_or_a_failing_write_fails_alone(engine):
    core, backend, events = engine
    with pytest.raises(ValueError, match="adapter slot 2 is not one of this engine's 2"):
        core.write_adapter(2, adapter()).result(timeout=1)  # refused at once, nothing queued
    backend.fail_next_write = True
    with pytest.raises(RuntimeError, match="device said no"):
        core.write_adapter(0, adapter()).result(timeout=30)
    assert backend.pool == {}
    gen = core.submit(_req())  # the engine goes on
    events.wait_for(lambda ev: events.ended([gen]))
    assert events.finish(gen).reason in ("stop", "length")
    core.write_adapter(0, adapter("orion")).result(timeout=30)
    assert backend.pool == {0: ("/adapters/orion", 8)}
