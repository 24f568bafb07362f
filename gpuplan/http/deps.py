"""Dependencies: the serving process's context and the caller's token (bearer header)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Request

from contract.records import ApiToken, Scope
from gpuplan.app.tokens import require
from gpuplan.http.context import ApiContext
from storage.store import Store

# The dependencies are coroutines: FastAPI runs a plain function's in a worker thread, a hop
# per dependency per request (about a third of a millisecond of processor time each).


async def context(request: Request) -> ApiContext:
    ctx: ApiContext = request.app.state.context
    return ctx


Context = Annotated[ApiContext, Depends(context)]


async def store(ctx: Context) -> Store:
    return ctx.store


StoreDep = Annotated[Store, Depends(store)]


def bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, credentials = header.partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" else None


async def request_marks(ctx: Context) -> tuple[int, ...]:
    """The store's marks as of this request, read once for it (FastAPI calls a dependency
    once per request) and shared with the requests that arrive together (:class:`FreshMarks`):
    the token check and a cached read both go by them."""
    return await ctx.marks()


Marks = Annotated[tuple[int, ...], Depends(request_marks)]


async def caller(request: Request, ctx: Context, marks: Marks) -> ApiToken:
    """The live token of the request's ``Authorization: Bearer`` header (401 otherwise)."""
    return await ctx.caller(bearer(request), marks)


def needs(scope: Scope) -> Callable[[ApiToken], Awaitable[ApiToken]]:
    """A dependency: the caller, who must hold ``scope`` (403 otherwise)."""

    async def dependency(token: Annotated[ApiToken, Depends(caller)]) -> ApiToken:
        return require(token, scope)

    return dependency


Reader = Annotated[ApiToken, Depends(needs(Scope.READ))]
Submitter = Annotated[ApiToken, Depends(needs(Scope.SUBMIT))]
Admin = Annotated[ApiToken, Depends(needs(Scope.ADMIN))]
