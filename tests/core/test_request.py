"""The one rule for what sampling a backend may be given (core/request.py
SamplingParams.validate): each field's range, bounds included, and the field a refusal
names (the edges hand it to the client as the error's field)."""

import math

import pytest

from orpheus_svc.core.request import SamplingError, SamplingParams


@pytest.mark.parametrize("fields", [
    dict(temperature=0.0), dict(temperature=2.0),
    dict(top_p=1.0), dict(top_p=1e-9),
    dict(repetition_penalty=1.0), dict(repetition_penalty=2.0),
    dict(seed=0), dict(seed=2 ** 64 + 5), dict(seed=-1), dict(seed=None),
], ids=repr)
def test_every_bound_of_every_range_is_accepted(fields):
    SamplingParams(**fields).validate()  # nothing raised


@pytest.mark.parametrize("field, value, message", [
    ("temperature", -0.001, "temperature must be in [0, 2], got -0.001"),
    ("temperature", 2.001, "temperature must be in [0, 2], got 2.001"),
    ("temperature", math.nan, "temperature must be in [0, 2], got nan"),
    ("top_p", 0.0, "top_p must be in (0, 1], got 0.0"),
    ("top_p", 1.001, "top_p must be in (0, 1], got 1.001"),
    ("top_p", math.nan, "top_p must be in (0, 1], got nan"),
    ("repetition_penalty", 0.999, "repetition_penalty must be in [1, 2], got 0.999"),
    ("repetition_penalty", 2.001, "repetition_penalty must be in [1, 2], got 2.001"),
    ("repetition_penalty", math.nan, "repetition_penalty must be in [1, 2], got nan"),
    ("seed", True, "seed must be an integer, got True"),
    ("seed", 1.0, "seed must be an integer, got 1.0"),
    ("seed", "7", "seed must be an integer, got '7'"),
])
def test_a_value_out_of_range_is_refused_naming_its_field(field, value, message):
    with pytest.raises(SamplingError) as err:
        SamplingParams(**{field: value}).validate()
    assert err.value.field == field
    assert str(err.value) == message
    assert isinstance(err.value, ValueError)


def test_the_defaults_are_orpheus_recommended_values_and_valid():
    params = SamplingParams()
    assert (params.temperature, params.top_p, params.repetition_penalty, params.seed) == \
        (0.6, 0.8, 1.1, None)
    params.validate()
