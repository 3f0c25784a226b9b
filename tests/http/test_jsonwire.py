"""The HTTP edge's bounded JSON decoder: every hostile document is an INVALID_ARGUMENT
ApiError, never RecursionError, OverflowError or ValueError (no server needed)."""

import pytest

from orpheus_svc.core.status import Status
from orpheus_svc.http.errors import ApiError
from orpheus_svc.http.jsonwire import MAX_DEPTH, decode, decode_object, integer


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


def refusal(text, what="the request body"):
    with pytest.raises(ApiError) as err:
        decode(text, what)
    assert err.value.code == Status.INVALID_ARGUMENT and err.value.status == 400
    return err.value.message


def test_each_refusal_says_what_was_wrong_with_what():
    """The message is what the client reads; `what` names the frame or body."""
    assert refusal(b"\xff\xfe", "a frame") == "a frame must be JSON in UTF-8"
    assert refusal("[" * 33 + "]" * 33, "a frame") == \
        "a frame nests objects or arrays deeper than 32 levels"
    assert refusal("{not json", "a frame") == "a frame must be JSON"
    assert refusal('{"x": NaN}') == "the request body: NaN is not a JSON number"
    assert refusal('{"x": -Infinity}') == "the request body: -Infinity is not a JSON number"
    assert refusal('{"x": 1e400}') == "the request body: the number 1e400 is out of range"
    long = "1" + "0" * 400 + ".5"
    assert refusal('{"x": ' + long + "}") == \
        f"the request body: the number {long[:30]}... is out of range"
    assert refusal('"\\udfff"') == \
        "the request body: a string holds a lone UTF-16 surrogate escape (not text)"


def test_bytes_in_utf8_decode_like_text():
    assert decode('{"input": "Zoë"}'.encode()) == {"input": "Zoë"}


def test_an_integer_of_40_digits_decodes_and_41_is_refused_with_its_length():
    """Literal bounds (the module says 40: a uint64 has 20); a minus sign is no digit."""
    forty = "9" * 40
    assert decode(forty) == int(forty)
    assert decode("-" + forty) == -int(forty)
    assert refusal("1" + forty) == "the request body: an integer of 41 digits (at most 40)"
    assert refusal("-1" + forty) == "the request body: an integer of 41 digits (at most 40)"
    assert decode("1e300") == 1e300 and decode("-2.5") == -2.5


@pytest.mark.parametrize("text", [
    '[["ok", "\\ud800"]]', '{"a": {"\\udfff": 1}}', '{"a": ["ok", {"b": "\\udc00"}]}',
    '{"ok": 1, "b": "\\ud800"}',
])
def test_a_lone_surrogate_is_found_in_any_key_or_value_at_any_depth(text):
    assert "lone UTF-16 surrogate" in refusal(text)


def test_a_request_is_an_object_and_comes_back_whole():
    assert decode_object('{"input": "Hi", "seed": 7}') == {"input": "Hi", "seed": 7}
    with pytest.raises(ApiError) as err:
        decode_object("[1]", "a frame")
    assert err.value.message == "a frame must be a JSON object"
    assert err.value.code == Status.INVALID_ARGUMENT


def test_an_integer_field_is_an_int_or_absent_and_nothing_else():
    body = {"seed": 7, "none": None, "zero": 0, "big": 2 ** 70, "flag": True, "f": 1.0,
            "s": "7"}
    assert integer(body, "seed") == 7
    assert integer(body, "zero") == 0
    assert integer(body, "big") == 2 ** 70  # ranges: server/settings.py
    assert integer(body, "none") is None and integer(body, "absent") is None
    for name, kind in (("flag", "bool"), ("f", "float"), ("s", "str")):
        with pytest.raises(ApiError) as err:
            integer(body, name, "options.")
        assert err.value.message == f"options.'{name}' must be an integer, got {kind}"
        assert err.value.param == name and err.value.code == Status.INVALID_ARGUMENT


def test_a_number_out_of_range_is_shown_whole_up_to_30_characters():
    thirty = "1" + "0" * 25 + "e400"
    assert len(thirty) == 30
    assert refusal(thirty) == f"the request body: the number {thirty} is out of range"
    longer = "1" + thirty
    assert refusal(longer) == f"the request body: the number {longer[:30]}... is out of range"


def test_decode_object_names_the_request_body_unless_told_and_passes_what_on():
    with pytest.raises(ApiError, match="^the request body must be a JSON object$"):
        decode_object("[1]")
    with pytest.raises(ApiError, match="^a frame must be JSON$"):
        decode_object("{bad", "a frame")
    with pytest.raises(ApiError, match="^a frame nests objects"):
        decode_object("[" * 40, "a frame")


def test_an_integer_fields_refusal_without_what_is_just_the_name():
    with pytest.raises(ApiError) as err:
        integer({"seed": 1.5}, "seed")
    assert err.value.message == "'seed' must be an integer, got float"


def test_closing_a_sibling_steps_back_one_level_not_to_the_top():
    """31 levels, an empty list, then a sibling nested two deep: depth 33."""
    text = "[" * 31 + "[],[[]]" + "]" * 31
    with pytest.raises(ApiError, match="deeper than 32 levels"):
        decode(text)
    assert decode("[" * 31 + "[],[]" + "]" * 31) is not None  # the sibling at depth 32


def test_decode_names_the_request_body_unless_told():
    with pytest.raises(ApiError, match="^the request body must be JSON$"):
        decode("{bad")
