"""Dependencies: the serving process's context, and the authorized call (bearer header).

Each API route takes one dependency, :func:`needs`'s: FastAPI's per-request work grows with
the dependencies a route declares (tens of microseconds each), and the context, the marks
and the token are all read from the one request anyway. The dependencies are coroutines:
FastAPI runs a plain function's in a worker thread, a hop per dependency per request (about
a third of a millisecond of processor time each).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request

from contract.errors import InputError
from contract.records import ApiToken, Scope
from gpuplan.app.core.tokens import require
from gpuplan.http.context import ApiContext


def context_of(request: Request) -> ApiContext:
    ctx: ApiContext = request.app.state.context
    return ctx


async def context(request: Request) -> ApiContext:
    known_query(request)
    return context_of(request)


_QUERY_NAMES: dict[int, frozenset[str]] = {}


def known_query(request: Request) -> None:
    """A query parameter the route does not take is refused (422 naming it), not ignored: a
    misspelt ``?limt=5`` would otherwise answer as if it were not there."""
    if not request.scope.get("query_string"):
        return
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None:
        return
    names = _QUERY_NAMES.get(id(route))
    if names is None:
        names = _QUERY_NAMES[id(route)] = frozenset(_query_names(dependant))
    unknown = sorted(set(request.query_params) - names)
    if unknown:
        taken = ", ".join(sorted(names)) or "none"
        raise InputError(
            unknown[0],
            f"absent (not a query parameter of {request.url.path}; it takes: {taken})",
            request.query_params[unknown[0]],
            hint=f"Unknown query parameters: {', '.join(unknown)}.",
        )


Context = Annotated[ApiContext, Depends(context)]


def bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, credentials = header.partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" else None


@dataclass(frozen=True)
class Call:
    """An authorized request: the serving context, the caller's live token (holding the
    route's scope), and the store's marks as of the request, read once for it and shared
    with the requests that arrive together (:class:`~gpuplan.app.jobs.changes.FreshMarks`): the
    token check and a cached read both go by them."""

    ctx: ApiContext
    token: ApiToken
    marks: tuple[int, ...]


def _query_names(dependant: Any) -> Iterator[str]:
    """The query parameters a route's dependant (and its dependencies) declare."""
    for param in dependant.query_params:
        yield param.alias
    for below in dependant.dependencies:
        yield from _query_names(below)


def needs(scope: Scope) -> Callable[[Request], Awaitable[Call]]:
    """A route's dependency: the call of the live token of the request's ``Authorization:
    Bearer`` header (401 otherwise), which must hold ``scope`` (403 otherwise)."""

    async def dependency(request: Request) -> Call:
        known_query(request)
        ctx = context_of(request)
        marks = await ctx.marks()
        token = await ctx.caller(bearer(request), marks)
        return Call(ctx, require(token, scope), marks)

    return dependency


Reader = Annotated[Call, Depends(needs(Scope.READ))]
Submitter = Annotated[Call, Depends(needs(Scope.SUBMIT))]
Admin = Annotated[Call, Depends(needs(Scope.ADMIN))]
