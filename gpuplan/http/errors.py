"""Every error as a JSON answer without a traceback: what the field was, what it should be.

- a body or query that breaks its pydantic model, or a use case's ``InputError``: 422 with
  ``errors: [{field, expected, received}]`` (404 for an id that names nothing);
- no or a wrong token: 401; a token that may not do this: 403;
- a body that is not JSON (its ``Content-Type``): 415;
- a body over the cap: 413 (:class:`BodyLimit`); the database down or busy: 503;
- anything else: logged with its traceback, answered 500 with one line.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from contract.errors import InputError, StoreError
from gpuplan.app.core.tokens import AccessDeniedError, NotFoundError, NotSignedInError
from gpuplan.http.body import UnsupportedMediaError

log = logging.getLogger("gpuplan.http")

_WHERE = {"body", "query", "path"}


def _field(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p not in _WHERE]
    text = ""
    for part in parts:
        text += f"[{part}]" if part.isdigit() else (f".{part}" if text else part)
    return text or "(body)"


def _expected(error: dict[str, Any]) -> str:
    kind = error.get("type", "")
    if kind == "missing":
        return "given (a required field)"
    if kind == "extra_forbidden":
        return "absent (not a field of this body)"
    message = str(error.get("msg", "a valid value"))
    for prefix in ("Input should be ", "Value error, "):
        message = message.removeprefix(prefix)
    return message


def _body(message: str, errors: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"message": message, "errors": errors or []}


def field_name(name: str) -> str:
    """A use case's field as the API spells it: ``--since`` -> ``since``, ``min-gpus`` -> ``min_gpus``."""
    return name.lstrip("-").replace("-", "_") if name.startswith("--") else name


def install(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        rows = [
            {
                "field": _field(tuple(e.get("loc", ()))),
                "expected": _expected(e),
                "received": None if e.get("type") == "missing" else _plain(e.get("input")),
            }
            for e in error.errors()
        ]
        first = rows[0] if rows else {"field": "(body)", "expected": "valid JSON", "received": None}
        message = f"`{first['field']}` must be {first['expected']}; got {first['received']!r}."
        return JSONResponse(_body(message, rows), status_code=422)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> JSONResponse:
        return JSONResponse(_body(str(error.detail)), status_code=error.status_code, headers=error.headers)

    @app.exception_handler(InputError)
    async def bad_input(request: Request, error: InputError) -> JSONResponse:
        row = {"field": field_name(error.field), "expected": error.expected, "received": _plain(error.got)}
        status = (
            404
            if isinstance(error, NotFoundError)
            else 415
            if isinstance(error, UnsupportedMediaError)
            else 422
        )
        return JSONResponse(_body(str(error), [row]), status_code=status)

    @app.exception_handler(NotSignedInError)
    async def not_signed_in(request: Request, error: NotSignedInError) -> JSONResponse:
        return JSONResponse(_body(str(error)), status_code=401, headers={"WWW-Authenticate": "Bearer"})

    @app.exception_handler(AccessDeniedError)
    async def denied(request: Request, error: AccessDeniedError) -> JSONResponse:
        return JSONResponse(_body(str(error)), status_code=403)

    @app.exception_handler(StoreError)
    async def store_down(request: Request, error: StoreError) -> JSONResponse:
        log.error("%s %s: %s", request.method, request.url.path, error)
        return JSONResponse(_body(str(error)), status_code=503)

    @app.exception_handler(Exception)
    async def internal(request: Request, error: Exception) -> JSONResponse:
        log.error("%s %s failed", request.method, request.url.path, exc_info=error)
        return JSONResponse(_body("internal error; the daemon's log has the details"), status_code=500)


def _plain(value: Any) -> Any:
    """A received value as JSON can carry it (and short: a long one is cut)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN or Infinity: the answer names it in text
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return value if len(value) <= 200 else value[:200] + "..."
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "..."


class BodyLimit:
    """ASGI middleware: a request body over ``max_bytes`` is answered 413 before it is read whole."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._too_large(send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:  # a chunked body: the route's body reading answers 413
                    raise HTTPException(413, too_large(self.max_bytes))
            return message

        await self.app(scope, limited, send)

    async def _too_large(self, send: Send) -> None:
        response = JSONResponse(_body(too_large(self.max_bytes)), status_code=413)
        await response({"type": "http"}, _empty_receive, send)


def too_large(max_bytes: int) -> str:
    return f"the request body is over {max_bytes} bytes"


async def _empty_receive() -> Message:
    return {"type": "http.disconnect"}
