"""The split topology's wire format (orpheus_svc/ipc/wire.py): pure round trips."""

import numpy as np

from orpheus_svc.core.events import AudioEvent, Finish, Rejected
from orpheus_svc.core.output import SchedulerStats
from orpheus_svc.core.request import GenerationRequest, SamplingParams
from orpheus_svc.core.status import Status
from orpheus_svc.core.voices import english_registry
from orpheus_svc.ipc import wire


def test_submit_and_cancel_round_trip():
    req = GenerationRequest("s1", 3, (128000, 5, 6, 7), 700, SamplingParams(0.7, 0.9, 1.2, 42), 12)
    gen_id = wire.first_id(1) + 5
    assert wire.decode_command(wire.encode_submit(gen_id, req)) == (wire.SUBMIT, gen_id, req)
    no_seed = GenerationRequest("s2", 0, (1,), 1)
    assert wire.decode_command(wire.encode_submit(9, no_seed))[2] == no_seed
    assert wire.decode_command(wire.encode_cancel(gen_id)) == (wire.CANCEL, gen_id, None)


def test_event_batch_round_trip_keeps_order_pcm_and_finish():
    pcm = np.linspace(-1, 1, 2048, dtype=np.float32)
    fin = Finish("error", 10, 21, 3, "audio decode failed (error id x)")
    batch = [AudioEvent(7, pcm, 4096), AudioEvent(7, np.zeros(0, np.float32), 6144, True, fin),
             Rejected(8, "queue full", Status.RESOURCE_EXHAUSTED), AudioEvent(9, pcm[:5], 0, True)]
    kind, out = wire.decode_message(wire.encode_events(batch))
    assert kind == wire.EVENTS and len(out) == len(batch)
    assert out[2] == batch[2]
    assert out[0].gen_id == 7 and out[0].sample_offset == 4096 and not out[0].final
    assert out[0].pcm.dtype == np.float32 and np.array_equal(out[0].pcm, pcm)
    assert out[1].final and out[1].finish == fin and out[1].num_samples == 0
    assert out[3].finish is None and np.array_equal(out[3].pcm, pcm[:5])


def test_float64_pcm_goes_as_float32():
    _, out = wire.decode_message(wire.encode_events([AudioEvent(1, np.ones(3), 0)]))
    assert out[0].pcm.dtype == np.float32 and out[0].pcm.tolist() == [1.0, 1.0, 1.0]


def test_stats_round_trip_with_and_without_info():
    stats = SchedulerStats(1, 2, 3, 4, 7, 10, 8, 1, 1, 99, 1234, 0, underrun_risk=2, row_budget=5)
    cold = wire.EngineSnapshot(warm=False, stats=stats, pid=11)
    assert wire.decode_message(wire.encode_stats(cold)) == (wire.STATS, cold)
    info = wire.EngineInfo("sim:h100-fp8", False, "cpu", "sim", "sim", english_registry(), 64)
    warm = wire.EngineSnapshot(True, stats, 3, 4, info, 11, {"dropped_batches": 0})
    kind, out = wire.decode_message(wire.encode_stats(warm))
    assert kind == wire.STATS and out == warm
    assert out.info.voices.names == english_registry().names


def test_adapter_voices_and_slots_cross_to_the_front_ends():
    """A front-end builds the requests: it needs each voice's adapter and each adapter's
    pool slot (runtime.FrontRuntime.adapter_of), as the engine process has them."""
    from orpheus_svc.core.voices import Voice, VoiceRegistry, with_adapter_voices

    voices = with_adapter_voices(english_registry(), [
        ("nova-lora", VoiceRegistry((Voice("nova", "en"),), "nova"))])
    stats = SchedulerStats(1, 2, 3, 4, 7, 10, 8, 1, 1, 99, 1234, 0)
    info = wire.EngineInfo("m", False, "cpu", "torch", "t.json", voices, 8, {"nova-lora": 3})
    _, out = wire.decode_message(wire.encode_stats(wire.EngineSnapshot(True, stats, info=info)))
    assert out.info.adapters == {"nova-lora": 3}
    assert out.info.voices.resolve("nova").adapter == "nova-lora"
    assert out.info.voices.resolve("tara").adapter is None


def test_lost_round_trip():
    assert wire.decode_message(wire.encode_lost([5, 6], "behind")) == (wire.LOST, ([5, 6], "behind"))


def test_ids_name_their_front_end():
    assert wire.frontend_of(1) is None and wire.frontend_of(wire.REMOTE_BASE - 1) is None
    for i in (0, 1, 7):
        assert wire.frontend_of(wire.first_id(i)) == i
        assert wire.frontend_of(wire.first_id(i + 1) - 1) == i
