"""The FastAPI application: the routers, the error answers, the body cap, the dashboard's files."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

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
    for module in (jobs, status, runs, reports, traffic, dashboard):
        app.include_router(module.router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app
