"""Request bodies: read as the command line reads a file, so that one document gets one answer.

A body is JSON (``Content-Type: application/json``, or none given), decoded and parsed by
:mod:`contract.files` under the rules every file follows: UTF-8, each key once in its object,
finite numbers only (NaN, Infinity and ``1e400`` are named by their field), at most 32 levels
deep. The use case then checks it (a job spec by :func:`gpuplan.app.jobs.submit.check_spec`, as
``gpuplan submit`` does), so the API holds no second copy of those checks.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import TypeAdapter, ValidationError

from contract.errors import InputError
from contract.files import decode_text, parse_json

WHAT = "(body)"
SOURCE = "request body"
JSON_TYPES = ("application/json",)


class UnsupportedMediaError(InputError):
    """A body in a type other than JSON (answered 415)."""


def check_json_type(request: Request) -> None:
    """A body given as anything but JSON is refused, naming the type it came as."""
    given = request.headers.get("content-type")
    if given is None:
        return
    media = given.split(";", 1)[0].strip().lower()
    if media in JSON_TYPES or (media.startswith("application/") and media.endswith("+json")):
        return
    raise UnsupportedMediaError("Content-Type", "application/json", given, source=SOURCE)


async def json_body(request: Request) -> Any:
    """The request's body as a JSON document held to :mod:`contract.files`'s rules."""
    check_json_type(request)
    data = await request.body()
    return parse_json(decode_text(data, WHAT, source=SOURCE), WHAT, source=SOURCE)


def validated(model: Any, document: Any) -> Any:
    """``document`` (already parsed) checked against a pydantic type; its errors answered as a
    body that breaks its model is (422, each field named: ``[2].requests``)."""
    try:
        return TypeAdapter(model).validate_python(document)
    except ValidationError as error:
        rows = [{**row, "loc": ("body", *row.get("loc", ()))} for row in error.errors(include_url=False)]
        raise RequestValidationError(rows) from None


def body_schema(model: Any, *, description: str) -> dict[str, Any]:
    """``openapi_extra`` declaring a JSON body of ``model`` (the route reads it with :func:`json_body`)."""
    schema = TypeAdapter(model).json_schema()
    defs = schema.pop("$defs", {})
    return {
        "requestBody": {
            "required": True,
            "description": description,
            "content": {"application/json": {"schema": _inline(schema, defs)}},
        }
    }


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    """A JSON schema with its local ``$ref``s replaced by what they name."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            return _inline(defs[ref.removeprefix("#/$defs/")], defs)
        return {key: _inline(value, defs) for key, value in node.items()}
    if isinstance(node, list):
        return [_inline(value, defs) for value in node]
    return node
