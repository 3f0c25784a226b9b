"""The one validation of a request's settings, shared by the gRPC and HTTP edges
(server/options.py): numbers are range-checked as the client sent them."""

import pytest
from prometheus_client import generate_latest

from orpheus_svc.config import load_config
from orpheus_svc.core.status import Status
from orpheus_svc.server.metrics import Metrics
from orpheus_svc.server.options import SEED_MAX, SamplingChoice, session_settings
from orpheus_svc.server.session import SessionError
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
    from orpheus_svc.server import options as shared
    assert http_sessions.shared is shared
    assert not hasattr(http_sessions, "_options")


def test_http_refusals_are_exported_by_reason(state):
    state.http_refused["body_timeout"] += 2
    text = generate_latest(Metrics(state).registry).decode()
    assert 'orpheus_http_refused_total{reason="body_timeout"} 2.0' in text
