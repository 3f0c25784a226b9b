"""The HTTP edge's one JSON decoder (POST bodies and WebSocket frames), with its own limits.

Python's `json.loads` ends in RecursionError on deeply nested input, accepts NaN,
Infinity and 1e400 (a float inf, which int() cannot convert), and raises ValueError on
integers of more than 4300 digits. Every one of those becomes ApiError(INVALID_ARGUMENT)
here, before a value reaches a handler:

- nesting deeper than MAX_DEPTH is refused by a scan that skips string contents and stops
  at the first bracket too deep (so no recursion happens at all);
- NaN / Infinity (not JSON) and numbers outside a float's range are refused;
- integers of more than MAX_INT_DIGITS digits are refused (every integer this API takes
  fits in 20 digits: a uint64 seed; and every one left converts to a float);
- strings holding a lone surrogate (an escape such as "\ud800" without its pair) are
  refused: they are no text, and no UTF-8 encoder (the tokenizer's, the log's) takes them.

The request's own fields are checked by the routes (type) and server/settings.py (range).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from orpheus_svc.core.status import Status

from .errors import ApiError

MAX_DEPTH = 32          # objects and arrays nested in each other
MAX_INT_DIGITS = 40     # an integer literal's digits (a uint64 has 20)

# A JSON string (skipped whole: brackets inside it are text) or one bracket.
_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')
# json.loads joins an escaped surrogate pair into one character: any surrogate left is lone
_SURROGATE = re.compile("[\ud800-\udfff]")


class _Refused(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise _Refused(f"{name} is not a JSON number")


def _bounded_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise _Refused(f"an integer of {digits} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"the number {text[:30]}{'...' if len(text) > 30 else ''} is out of range")
    return value


def _too_deep(text: str) -> bool:
    depth = 0
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return True
        elif token in "]}":
            depth -= 1
    return False


def decode(data: bytes | str, what: str = "the request body") -> Any:
    """The JSON value of `data`, or ApiError(INVALID_ARGUMENT) naming `what` was wrong."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ApiError(Status.INVALID_ARGUMENT, f"{what} must be JSON in UTF-8") from None
    if _too_deep(data):
        raise ApiError(Status.INVALID_ARGUMENT,
                       f"{what} nests objects or arrays deeper than {MAX_DEPTH} levels")
    try:
        value = json.loads(data, parse_constant=_reject_constant, parse_int=_bounded_int,
                           parse_float=_finite_float)
        _check_strings(value)
        return value
    except _Refused as exc:
        raise ApiError(Status.INVALID_ARGUMENT, f"{what}: {exc}") from None
    except (json.JSONDecodeError, RecursionError, ValueError):
        raise ApiError(Status.INVALID_ARGUMENT, f"{what} must be JSON") from None


def _check_strings(value: Any) -> None:
    """_Refused at a string with a lone surrogate (nesting is bounded: recursion is safe)."""
    if isinstance(value, str):
        if _SURROGATE.search(value):
            raise _Refused("a string holds a lone UTF-16 surrogate escape (not text)")
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_strings(key)
            _check_strings(item)
    elif isinstance(value, list):
        for item in value:
            _check_strings(item)


def decode_object(data: bytes | str, what: str = "the request body") -> dict:
    """`decode`, and the value must be a JSON object."""
    value = decode(data, what)
    if not isinstance(value, dict):
        raise ApiError(Status.INVALID_ARGUMENT, f"{what} must be a JSON object")
    return value


def integer(body: dict, name: str, what: str = "") -> int | None:
    """An optional integer field (absent or null = None). A float, bool or string is refused:
    ranges are checked by server/settings.py on the integer itself."""
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(Status.INVALID_ARGUMENT, f"{what}'{name}' must be an integer, got "
                       f"{type(value).__name__}", name)
    return value
