"""The FastAPI application: the routers, the error answers, the body cap, the dashboard's files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpuplan.http import errors
from gpuplan.http.context import ApiContext
from gpuplan.http.routers import dashboard, jobs, reports, runs, status, traffic

STATIC = Path(__file__).parent / "static"


def create_app(context: ApiContext) -> FastAPI:
    app = FastAPI(
        title="gpuplan",
        version="1",
        summary="Plans a GPU cluster 24 hours ahead: submit jobs, read the plan and its reports.",
        openapi_url="/v1/openapi.json",
        docs_url=None,  # the interactive pages load their scripts from a CDN
        redoc_url=None,
        debug=False,
        # No OpenTelemetry here (the daemon's metrics are Prometheus's): off, FastAPI skips
        # asking the global providers on every request.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.state.context = context
    errors.install(app)
    app.add_middleware(errors.BodyLimit, max_bytes=context.max_body_bytes)
    app.add_middleware(SecurityHeaders)
    for module in (jobs, status, runs, reports, traffic, dashboard):
        app.include_router(module.router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


#: Sent with every answer: the page runs its own script and style only, is never framed, and
#: no answer is read as another type than it says.
SECURITY_HEADERS = (
    (
        b"content-security-policy",
        (
            b"default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
            b"object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
        ),
    ),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
)


class SecurityHeaders:
    """ASGI middleware: :data:`SECURITY_HEADERS` on every answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)


#: The API's routes that need no token.
OPEN_PATHS = frozenset({"/healthz"})


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's schema with the bearer token declared, and required by every ``/v1`` route."""
    if app.openapi_schema is None:
        schema = get_openapi(title=app.title, version=app.version, summary=app.summary, routes=app.routes)
        schema.setdefault("components", {})["securitySchemes"] = {
            "bearer": {
                "type": "http",
                "scheme": "bearer",
                "description": "a token made by `gpuplan token create` (scopes read, submit, admin)",
            }
        }
        for path, operations in schema["paths"].items():
            if path not in OPEN_PATHS:
                for operation in operations.values():
                    operation["security"] = [{"bearer": []}]
        app.openapi_schema = schema
    return app.openapi_schema
