"""Request bodies and path parameters, checked explicitly: a wrong JSON type is a 400 naming the field,
never coerced (``true`` is not an integer, ``"5"`` is not a number, ``1.0`` is not an integer)."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from magnetar.topic_name import InvalidTopicNameError, TopicName, decode_local_name

from .errors import bad_request

ABSENT = object()  # an empty body where one is optional


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


async def read_json(request: web.Request, *, required: bool = True) -> Any:
    """The request's JSON body; ABSENT for an empty optional body. 400 if malformed or missing."""
    raw = await request.read()
    if not raw.strip():
        if required:
            raise bad_request(f"{request.method} {request.rel_url.path} needs a JSON body")
        return ABSENT
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise bad_request(f"the request body is not valid JSON: {e}") from None


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "an object"}.get(type(value), type(value).__name__)


def expect_int(value: Any, what: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    if type(value) is not int:
        raise bad_request(f"{what} must be an integer, got {type_name(value)}")
    if minimum is not None and value < minimum:
        raise bad_request(f"{what} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise bad_request(f"{what} must be <= {maximum}, got {value}")
    return value


def expect_bool(value: Any, what: str) -> bool:
    if type(value) is not bool:
        raise bad_request(f"{what} must be true or false, got {type_name(value)}")
    return value


def expect_str(value: Any, what: str, *, nullable: bool = False) -> str:
    if value is None and nullable:
        return ""
    if not isinstance(value, str):
        raise bad_request(f"{what} must be a string, got {type_name(value)}")
    return value


def expect_object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise bad_request(f"{what} must be a JSON object, got {type_name(value)}")
    return value


def expect_str_list(value: Any, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise bad_request(f"{what} must be a list of strings, got {type_name(value)}")
    return list(value)


def path_int(request: web.Request, key: str, *, minimum: int = 0) -> int:
    """An integer path parameter (decimal digits only)."""
    text = request.match_info[key]
    if not text.isascii() or not text.isdigit():
        raise bad_request(f"{key} must be a non-negative integer, got {text!r}")
    value = int(text)
    if value < minimum:
        raise bad_request(f"{key} must be >= {minimum}, got {value}")
    return value


def query_bool(request: web.Request, key: str, default: bool = False) -> bool:
    text = request.query.get(key)
    if text is None:
        return default
    if text.lower() in ("true", "1"):
        return True
    if text.lower() in ("false", "0"):
        return False
    raise bad_request(f"query parameter {key} must be true or false, got {text!r}")


def topic_of(request: web.Request, segment_index: int) -> TopicName:
    """The topic named by ``{domain}/{tenant}/{namespace}/<encoded local name>`` in the URL.

    The local name is read from the raw path and decoded as Pulsar encodes it (Java's URLEncoder: ``+``
    is a space), so names with ``/``, ``%`` or spaces survive the trip.
    """
    raw_parts = request.rel_url.raw_path.split("/")
    try:
        local = decode_local_name(raw_parts[segment_index])
    except (IndexError, UnicodeDecodeError):
        raise bad_request(f"malformed topic in {request.rel_url.raw_path!r}") from None
    info = request.match_info
    try:
        return TopicName.parse(f"{info['domain']}://{info['tenant']}/{info['namespace']}/{local}")
    except InvalidTopicNameError as e:
        raise bad_request(str(e)) from None
