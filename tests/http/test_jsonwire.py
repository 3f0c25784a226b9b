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


def test_the_documented_depth_of_32_is_accepted_and_33_refused():
    """Literal depths (docs/http.md says 32), not the module's own constant, so that changing
    MAX_DEPTH is seen; objects count as arrays do."""
    value = decode("[" * 32 + "]" * 32)
    for _ in range(31):
        (value,) = value
    assert value == []
    assert decode('{"a": ' * 32 + "1" + "}" * 32) is not None
    for text in ("[" * 33 + "]" * 33, '{"a": ' * 33 + "1" + "}" * 33,
                 '{"a": ' + "[" * 32 + "]" * 32 + "}"):
        with pytest.raises(ApiError, match="deeper than 32 levels"):
            decode(text)


def test_siblings_do_not_add_up_to_depth():
    """Only nesting counts: 33 (or 1000) empty arrays side by side are depth 2. Caught
    planted bug: counting every opening bracket instead of the depth (a closing bracket
    not lowering it) refused a plain list of 33 lists."""
    assert decode("[" + ",".join(["[]"] * 33) + "]") == [[]] * 33
    assert decode('{"rows": [' + ",".join(['{"a": [1]}'] * 1000) + "]}")["rows"][999] == {"a": [1]}
    deep_after_siblings = "[" + "[]," * 40 + "[" * 31 + "]" * 31 + "]"
    assert decode(deep_after_siblings) is not None  # depth 32 after 40 siblings
