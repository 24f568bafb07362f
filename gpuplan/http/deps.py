"""Dependencies: the serving process's context and the caller's token (bearer header)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Request

from contract.records import ApiToken, Scope
from gpuplan.app.tokens import authenticate, require
from gpuplan.http.context import ApiContext
from storage.store import Store


def context(request: Request) -> ApiContext:
    ctx: ApiContext = request.app.state.context
    return ctx


Context = Annotated[ApiContext, Depends(context)]


def store(ctx: Context) -> Store:
    return ctx.store


StoreDep = Annotated[Store, Depends(store)]


def bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, credentials = header.partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" else None


def caller(request: Request, ctx: Context) -> ApiToken:
    """The live token of the request's ``Authorization: Bearer`` header (401 otherwise)."""
    return authenticate(ctx.store, bearer(request))


def needs(scope: Scope) -> Callable[[ApiToken], ApiToken]:
    """A dependency: the caller, who must hold ``scope`` (403 otherwise)."""

    def dependency(token: Annotated[ApiToken, Depends(caller)]) -> ApiToken:
        return require(token, scope)

    return dependency


Reader = Annotated[ApiToken, Depends(needs(Scope.READ))]
Submitter = Annotated[ApiToken, Depends(needs(Scope.SUBMIT))]
Admin = Annotated[ApiToken, Depends(needs(Scope.ADMIN))]
