"""SessionSettings: built and validated once at the edge (server/settings.py), every default
filled there and only there, explicit zeros kept, and every refusal naming its field."""

import asyncio
import math

import pytest
from orpheus_tts_client.proto.v1 import tts_pb2 as pb

from orpheus_svc.config import load_config
from orpheus_svc.core.request import GenerationRequest, SamplingError, SamplingParams
from orpheus_svc.core.status import Status
from orpheus_svc.engine.intake import row_problem as _row_problem
from orpheus_svc.runtime import FrontRuntime
from orpheus_svc.server import servicer
from orpheus_svc.core.errors import SessionError
from orpheus_svc.server.session import StreamSession, TextIn
from orpheus_svc.server.settings import SEED_MAX, SamplingChoice, SessionSettings, session_settings
from orpheus_svc.server.state import ServerState

from .test_session import FakeRuntime

# config.sampling and text.normalize away from SamplingParams' own defaults, so a default
# filled from the wrong place shows
CONFIG = {"sampling.temperature": 0.3, "sampling.top_p": 0.5, "sampling.repetition_penalty": 1.3,
          "text.normalize": True}


@pytest.fixture
def state():
    return ServerState(load_config(overrides=CONFIG))  # no runtime: the English voices


def settings(state, voice="tara", encoding="pcm16", rate=0, allow_wav=True, normalize=None,
             **sampling):
    return session_settings(state, voice, encoding, rate, SamplingChoice(**sampling),
                            allow_wav=allow_wav, normalize=normalize)


def test_what_a_request_leaves_unset_comes_from_the_config(state):
    s = settings(state)
    assert s.sampling == SamplingParams(0.3, 0.5, 1.3, None)
    assert (s.voice, s.encoding, s.sample_rate, s.normalize_text) == ("tara", "pcm16", 24000, True)
    assert settings(state, encoding="mulaw").sample_rate == 8000  # rate 0: the encoding's own


def test_explicit_zeros_and_false_are_kept_not_replaced_by_defaults(state):
    s = settings(state, temperature=0.0, seed=0, normalize=False)  # temperature 0 = greedy
    assert s.sampling == SamplingParams(0.0, 0.5, 1.3, 0) and s.normalize_text is False


def test_the_grpc_edge_passes_an_explicit_zero_temperature_as_zero(state):
    msg = pb.SynthesisConfig(voice="leo", sampling=pb.SamplingOptions(temperature=0.0, seed=0))
    s = servicer._settings(state, msg, allow_wav=False)
    assert s.sampling == SamplingParams(0.0, 0.5, 1.3, 0) and s.voice == "leo"
    unset = servicer._settings(state, pb.SynthesisConfig(), allow_wav=False)
    assert unset.sampling == SamplingParams(0.3, 0.5, 1.3, None)


@pytest.mark.parametrize("request_, field, words", [
    (dict(voice="alloy"), "voice", "unknown voice 'alloy'; known voices: tara, leah"),
    (dict(encoding="wav", allow_wav=False), "encoding", "WAV is only offered by Synthesize"),
    (dict(rate=-1), "sample_rate", "sample_rate_hz must be an integer in 0..2147483647, got -1"),
    (dict(rate=12345), "sample_rate", "sample_rate_hz 12345 is not supported for PCM16"),
    (dict(seed=-1), "seed", "seed must be an integer in 0..18446744073709551615, got -1"),
    (dict(seed=SEED_MAX + 1), "seed", "seed must be an integer in 0.."),
    (dict(temperature=2.5), "temperature", "sampling: temperature must be in [0, 2], got 2.5"),
    (dict(temperature=math.nan), "temperature", "sampling: temperature must be in [0, 2]"),
    (dict(top_p=0.0), "top_p", "sampling: top_p must be in (0, 1], got 0.0"),
    (dict(repetition_penalty=0.5), "repetition_penalty",
     "sampling: repetition_penalty must be in [1, 2], got 0.5"),
], ids=lambda v: v if isinstance(v, str) and " " not in v else None)
def test_every_refusal_names_its_field_in_the_words_clients_know(state, request_, field, words):
    with pytest.raises(SessionError) as err:
        settings(state, **request_)
    assert err.value.code == Status.INVALID_ARGUMENT
    assert err.value.field == field and err.value.message.startswith(words)


def test_an_encoding_the_grpc_edge_does_not_know_is_refused_for_its_field(state):
    msg = pb.SynthesizeRequest(text="Hi.", audio_format=pb.AudioFormat(encoding=99))
    with pytest.raises(SessionError) as err:
        servicer._settings(state, msg, allow_wav=True)
    assert err.value.field == "encoding" and err.value.message == "unknown audio encoding 99"


def test_the_runtime_takes_a_sessions_sampling_as_it_is():
    config = load_config(overrides=CONFIG)
    front = FrontRuntime(config=config, engine=None, router=None, encode=lambda t: [5] * len(t),
                         model_name="test", is_demo=True, device="cpu")
    greedy = SamplingParams(0.0, 0.9, 1.0, None)
    assert front.request("s", 0, "tara", "Hi.", greedy).sampling is greedy


class RecordingRuntime(FakeRuntime):
    def request(self, session_id, segment_index, voice, text, sampling=None, adapter=-1,
                reference=None):
        self.sampling = getattr(self, "sampling", []) + [sampling]
        return GenerationRequest(session_id, segment_index, (1, 2, 3), 70, sampling)


@pytest.mark.parametrize("seed", [None, SEED_MAX])
def test_each_segment_gets_the_settings_sampling_and_only_its_seed_moves(state, seed):
    s = settings(state, temperature=0.0, seed=seed)
    rt = RecordingRuntime()

    async def run():
        async def source():
            yield TextIn("One. Two. Three.")
        return [o async for o in StreamSession(rt, s, state.config.text).run(source())]

    asyncio.run(asyncio.wait_for(run(), 30))
    if seed is None:
        assert all(got is s.sampling for got in rt.sampling)  # not rebuilt, not refilled
    else:  # segment i: seed + i, modulo 2^64
        assert [got.seed for got in rt.sampling] == [SEED_MAX, 0, 1]
        assert {(got.temperature, got.top_p, got.repetition_penalty) for got in rt.sampling} \
            == {(0.0, 0.5, 1.3)}


def test_settings_are_frozen():
    s = SessionSettings("tara", "pcm16", 24000, SamplingParams())
    with pytest.raises(AttributeError):
        s.voice = "leo"


@pytest.mark.parametrize("params, field", [
    (SamplingParams(top_p=math.nan), "top_p"), (SamplingParams(seed=1.5), "seed"),
    (SamplingParams(seed=True), "seed"),
    (SamplingParams(repetition_penalty=2.5), "repetition_penalty"),
])
def test_the_engines_guard_is_the_same_rule_with_the_same_words(params, field):
    """What the loop kept (engine/intake.py row_problem): SamplingParams.validate, not
    checks of its own, for requests that reach the engine without an edge."""
    with pytest.raises(SamplingError) as err:
        params.validate()
    assert err.value.field == field
    req = GenerationRequest("s", 0, (1, 2, 3), 70, params)
    assert _row_problem(req) == f"sampling: {err.value}"
    assert _row_problem(GenerationRequest("s", 0, (1, 2, 3), 70, SamplingParams(seed=-1))) is None
