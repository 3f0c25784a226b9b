"""The one validation of a request's settings, shared by the gRPC and HTTP edges
(server/settings.py): numbers are range-checked as the client sent them."""

import pytest
from prometheus_client import generate_latest

from orpheus_svc.config import load_config
from orpheus_svc.core.status import Status
from orpheus_svc.server.metrics import Metrics
from orpheus_svc.server.settings import SEED_MAX, SamplingChoice, session_settings
from orpheus_svc.core.errors import SessionError
from orpheus_svc.server.state import ServerState


@pytest.fixture
def state():
    return ServerState(load_config(overrides={}))  # no runtime: the English voices


def options(state, rate=0, seed=None, encoding="pcm16"):
    return session_settings(state, "tara", encoding, rate, SamplingChoice(seed=seed),
                            allow_wav=True)


@pytest.mark.parametrize("seed", [-1, 2 ** 64, 10 ** 5000, True, 1.0],
                         ids=["negative", "2^64", "5001-digits", "bool", "float"])
def test_a_seed_outside_uint64_is_invalid_argument(state, seed):
    with pytest.raises(SessionError) as err:
        options(state, seed=seed)
    assert err.value.code == Status.INVALID_ARGUMENT and "seed" in err.value.message
    assert len(err.value.message) < 200  # a 5000-digit seed is not echoed back


def test_the_uint64_bounds_are_accepted_as_seeds(state):
    """Literal bounds, not the module's own constant. Caught planted bug: SEED_MAX lowered
    to 2^63-1 (a uint64 seed the gRPC edge carries refused)."""
    assert options(state, seed=0).sampling.seed == 0
    assert options(state, seed=2 ** 64 - 1).sampling.seed == 18446744073709551615
    assert SEED_MAX == 2 ** 64 - 1


def sampled(state, **fields):
    return session_settings(state, "tara", "pcm16", 0, SamplingChoice(**fields),
                            allow_wav=True).sampling


def test_an_explicit_zero_temperature_is_greedy_not_the_default(state):
    """Caught planted bug: `sampling.temperature or default` turned an explicit greedy
    request (temperature 0) into the server's 0.6."""
    assert state.config.sampling.temperature == 0.6
    assert sampled(state, temperature=0.0).temperature == 0.0
    assert sampled(state, temperature=0.0, seed=0).seed == 0


def test_unset_sampling_fields_take_the_servers_defaults(state):
    params = sampled(state)
    assert (params.temperature, params.top_p, params.repetition_penalty, params.seed) == \
        (0.6, 0.8, 1.1, None)
    params = sampled(state, temperature=1.5, top_p=0.3, repetition_penalty=1.0, seed=7)
    assert (params.temperature, params.top_p, params.repetition_penalty, params.seed) == \
        (1.5, 0.3, 1.0, 7)


@pytest.mark.parametrize("field", ["top_p", "repetition_penalty"])
def test_an_explicit_zero_that_is_out_of_range_is_refused_not_replaced(state, field):
    """top_p is in (0, 1], repetition_penalty in [1, 2]: an explicit 0 is an error the
    client hears about. Caught planted bug: `or default` (the zero silently became 0.8 or
    1.1)."""
    with pytest.raises(SessionError) as err:
        sampled(state, **{field: 0.0})
    assert err.value.code == Status.INVALID_ARGUMENT and field in err.value.message


@pytest.mark.parametrize("rate", [-8000, 1 << 31, 10 ** 400, 12345],
                         ids=["negative", "2^31", "401-digits", "not-offered"])
def test_a_rate_out_of_range_or_not_offered_is_invalid_argument(state, rate):
    with pytest.raises(SessionError) as err:
        options(state, rate=rate)
    assert err.value.code == Status.INVALID_ARGUMENT and "sample_rate_hz" in err.value.message


def test_the_http_edge_validates_with_the_shared_module_not_the_servicer():
    import orpheus_svc.http.sessions as http_sessions
    from orpheus_svc.server import settings as shared
    assert http_sessions.shared is shared
    assert not hasattr(http_sessions, "_options")


def test_http_refusals_are_exported_by_reason(state):
    state.http_refused["body_timeout"] += 2
    text = generate_latest(Metrics(state).registry).decode()
    assert 'orpheus_http_refused_total{reason="body_timeout"} 2.0' in text


# check_range and build_settings directly (no server): every refusal's message and field,
# every bound, and each setting carried into SessionSettings as given.
from orpheus_svc.core.voices import registry_from_setting  # noqa: E402
from orpheus_svc.server.settings import build_settings, check_range  # noqa: E402


def refused(call, *args, **kwargs):
    with pytest.raises(SessionError) as err:
        call(*args, **kwargs)
    assert err.value.code == Status.INVALID_ARGUMENT
    return err.value


def test_check_range_accepts_both_bounds_and_refuses_one_past_either():
    check_range("n", 0, 0, 10)
    check_range("n", 10, 0, 10)
    check_range("n", 2 ** 64 - 1, 0, 2 ** 64 - 1)
    low = refused(check_range, "n", -1, 0, 10)
    assert (low.message, low.field) == ("n must be an integer in 0..10, got -1", "n")
    high = refused(check_range, "sample_rate_hz", 11, 0, 10, field="sample_rate")
    assert (high.message, high.field) == \
        ("sample_rate_hz must be an integer in 0..10, got 11", "sample_rate")


@pytest.mark.parametrize("value, shown", [
    (True, "True"), (1.0, "1.0"), ("7", "'7'"), (None, "None"),
    ("x" * 100, repr("x" * 100)[:40]),
    (2 ** 100 - 1, str(2 ** 100 - 1)),            # 100 bits: still shown
    (2 ** 100, "an integer of 101 bits"), (-(2 ** 200), "an integer of 201 bits"),
])
def test_check_range_refuses_what_is_no_int_and_shows_it_short(value, shown):
    err = refused(check_range, "seed", value, 0, 2 ** 64 - 1)
    assert err.message == f"seed must be an integer in 0..18446744073709551615, got {shown}"
    assert err.field == "seed"


@pytest.fixture
def config():
    return load_config(overrides={})


def build(config, voice="tara", encoding="pcm16", rate=0, allow_wav=True, voices=None,
          **kwargs):
    return build_settings(config, voices or registry_from_setting("tara, leah, pierre:fr"),
                          voice, encoding, rate, kwargs.pop("sampling", SamplingChoice()),
                          allow_wav=allow_wav, **kwargs)


def test_the_voice_is_resolved_in_any_case_and_carries_its_language(config):
    got = build(config, voice=" PIERRE ")
    assert (got.voice, got.language) == ("pierre", "fr")
    assert build(config, voice="").voice == "tara"  # the model's default
    err = refused(build, config, voice="nobody")
    assert err.field == "voice"
    assert err.message == "unknown voice 'nobody'; known voices: tara, leah, pierre"


def test_wav_is_refused_where_not_allowed_and_kept_where_it_is(config):
    err = refused(build, config, encoding="wav", allow_wav=False)
    assert err.field == "encoding"
    assert err.message == "WAV is only offered by Synthesize; stream PCM16 or MULAW here"
    assert build(config, encoding="wav", allow_wav=True).encoding == "wav"
    assert build(config, encoding="pcm16", allow_wav=False).encoding == "pcm16"


def test_rate_zero_is_the_encodings_default_and_an_offered_rate_is_kept(config):
    assert build(config).sample_rate == 24000
    assert build(config, encoding="mulaw").sample_rate == 8000
    assert build(config, rate=16000).sample_rate == 16000
    assert build(config, rate=48000).sample_rate == 48000
    err = refused(build, config, encoding="mulaw", rate=16000)
    assert err.field == "sample_rate"
    assert err.message == "sample_rate_hz 16000 is not supported for MULAW; use one of 8000"
    err = refused(build, config, rate=12345)
    assert err.message == ("sample_rate_hz 12345 is not supported for PCM16; "
                           "use one of 24000, 48000, 16000, 8000")
    err = refused(build, config, rate=2 ** 31)
    assert err.field == "sample_rate" and "sample_rate_hz must be an integer in 0..2147483647" \
        in err.message


def test_a_sampling_refusal_names_the_field_and_says_sampling(config):
    err = refused(build, config, sampling=SamplingChoice(top_p=1.5))
    assert err.field == "top_p"
    assert err.message == "sampling: top_p must be in (0, 1], got 1.5"
    err = refused(build, config, sampling=SamplingChoice(repetition_penalty=0.5, seed=-1))
    assert err.field == "seed"  # the seed is checked first


def test_normalisation_follows_the_request_then_the_config_and_only_where_there_is_a_normaliser(
        config):
    assert config.text.normalize is True
    assert build(config).normalize_text is True
    assert build(config, normalize=False).normalize_text is False
    assert build(config, normalize=True).normalize_text is True
    assert build(config, voice="pierre", normalize=True).normalize_text is False
    off = load_config(overrides={"text.normalize": "false"})
    assert build(off).normalize_text is False
    assert build(off, normalize=True).normalize_text is True


def test_whole_is_carried_and_off_by_default(config):
    assert build(config).whole is False
    assert build(config, whole=True).whole is True


def test_the_settings_use_the_loaded_models_voices_when_there_is_one(state):
    class Runtime:
        voices = registry_from_setting("pierre:fr, amelie:fr")

        def voice_refusal(self, voice):  # no adapter is being unloaded
            return None

    state.runtime = Runtime()
    got = session_settings(state, "", "pcm16", 0, SamplingChoice(), allow_wav=True)
    assert (got.voice, got.language, got.normalize_text, got.whole) == \
        ("pierre", "fr", False, False)
    assert session_settings(state, "", "pcm16", 0, SamplingChoice(), allow_wav=True,
                            whole=True).whole is True
    with pytest.raises(SessionError):
        session_settings(state, "tara", "pcm16", 0, SamplingChoice(), allow_wav=True)


def test_the_server_call_passes_wav_and_normalisation_choices_on(state):
    with pytest.raises(SessionError) as err:
        session_settings(state, "tara", "wav", 0, SamplingChoice(), allow_wav=False)
    assert err.value.field == "encoding"
    assert session_settings(state, "tara", "wav", 0, SamplingChoice(),
                            allow_wav=True).encoding == "wav"
    assert session_settings(state, "tara", "pcm16", 0, SamplingChoice(), allow_wav=True,
                            normalize=False).normalize_text is False
    assert session_settings(state, "tara", "pcm16", 0, SamplingChoice(),
                            allow_wav=True).normalize_text is True
