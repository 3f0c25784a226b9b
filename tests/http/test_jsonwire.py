"""The HTTP edge's bounded JSON decoder: every hostile document is an INVALID_ARGUMENT
ApiError, never RecursionError, OverflowError or ValueError (no server needed)."""

import pytest

from orpheus_svc.core.status import Status
from orpheus_svc.http.errors import ApiError
from orpheus_svc.http.jsonwire import MAX_DEPTH, decode, decode_object


@pytest.mark.parametrize("text", [
    "[" * 100_000, '{"a": ' * 50_000 + "1" + "}" * 50_000, "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1),
    '{"seed": ' + "9" * 5000 + "}", '{"x": 1e400}', '{"x": -1e400}', '{"x": Infinity}',
    '{"x": NaN}', b"\xff\xfe", "{not json", "", '{"input": "\\ud800 Hi."}', '{"\\udfff": 1}',
])
def test_hostile_documents_are_invalid_argument(text):
    with pytest.raises(ApiError) as err:
        decode(text)
    assert err.value.code == Status.INVALID_ARGUMENT and err.value.status == 400


def test_brackets_inside_strings_do_not_count_as_nesting():
    text = '{"s": "' + "[{" * 1000 + '\\"["}'
    assert decode(text) == {"s": "[{" * 1000 + '"['}


def test_nesting_up_to_the_limit_and_large_but_bounded_integers_decode():
    assert decode("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None
    assert decode('{"seed": 18446744073709551616}') == {"seed": 2 ** 64}  # range: options.py


def test_only_an_object_is_a_request():
    with pytest.raises(ApiError, match="JSON object"):
        decode_object("[1]")


def test_an_escaped_surrogate_pair_is_one_character_and_accepted():
    assert decode('"\\ud83d\\ude00"') == "\U0001F600"
