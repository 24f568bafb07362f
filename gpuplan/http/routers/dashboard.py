"""``/``: the dashboard, server-rendered; sign-in with a token once, then a session cookie.

The cookie is HttpOnly and SameSite=Strict (Secure over HTTPS) and names a session kept in
the database; every form carries the session's CSRF token, and the sign-in form, before
there is a session, a token of its own that its page also set in a cookie (the
double-submit pattern). Submit and cancel go through the same use cases as ``POST
/v1/jobs`` and ``DELETE /v1/jobs/{id}``, and answer with a 303 redirect to the page
(post/redirect/get), which shows what they did once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, unquote

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from contract.errors import InputError
from contract.records import ApiToken, Scope, WebSession
from gpuplan.app.core.tokens import (
    SESSION_HOURS,
    AccessDeniedError,
    NotSignedInError,
    check_csrf,
    check_signin_csrf,
    close_session,
    grants,
    open_session,
    session_of,
    signin_csrf,
)
from gpuplan.app.views.dashboard import CLASS_NAMES
from gpuplan.http.deps import Context

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=Path(__file__).parent.parent / "templates")
COOKIE = "gpuplan_session"
SIGNIN_COOKIE = "gpuplan_signin"
#: What a form post did, carried to the page its redirect shows (post/redirect/get).
FLASH_COOKIE = "gpuplan_flash"
FLASH_SECONDS = 60

Signed = tuple[WebSession, ApiToken]


def signed_in(request: Request, ctx: Context) -> Signed | None:
    return session_of(ctx.store, request.cookies.get(COOKIE), ctx.clock())


Session = Annotated[Signed | None, Depends(signed_in)]


def _page(
    request: Request, ctx: Context, signed: Signed, *, message: str | None = None, status: int = 200
) -> HTMLResponse:
    session, token = signed
    data: dict[str, Any] = ctx.dashboard()
    data.update(
        token=token,
        csrf=session.csrf,
        can_submit=grants(token, Scope.SUBMIT),
        is_admin=grants(token, Scope.ADMIN),
        message=message,
        class_names=CLASS_NAMES,
    )
    return templates.TemplateResponse(request, "dashboard.html", data, status_code=status)


def set_cookie(
    request: Request, response: Response, name: str, value: str, *, max_age: int, path: str
) -> None:
    """A cookie for the page's own use: HttpOnly, SameSite=Strict, and Secure when served over HTTPS."""
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        httponly=True,
        samesite="strict",
        path=path,
        secure=request.url.scheme == "https",
    )


def _done(request: Request, message: str) -> Response:
    """A form post that did its work answers with a redirect to the page, which shows
    ``message`` once: a refresh of the page then reloads it, never posts again."""
    response = RedirectResponse("/", status_code=303)
    set_cookie(request, response, FLASH_COOKIE, quote(message), max_age=FLASH_SECONDS, path="/")
    return response


@router.get("/", response_class=HTMLResponse)
def index(request: Request, ctx: Context, signed: Session) -> Response:
    if signed is None:
        return RedirectResponse("/signin", status_code=303)
    flash = request.cookies.get(FLASH_COOKIE)
    response = _page(request, ctx, signed, message=None if flash is None else unquote(flash))
    if flash is not None:
        response.delete_cookie(FLASH_COOKIE, path="/")
    return response


def _signin_page(request: Request, message: str | None = None, status: int = 200) -> Response:
    """The sign-in form with a fresh CSRF token, in the form and in a cookie of its own."""
    csrf = signin_csrf()
    response = templates.TemplateResponse(
        request, "signin.html", {"message": message, "csrf": csrf}, status_code=status
    )
    set_cookie(request, response, SIGNIN_COOKIE, csrf, max_age=3600, path="/signin")
    return response


@router.get("/signin", response_class=HTMLResponse)
def signin_form(request: Request) -> Response:
    return _signin_page(request)


@router.post("/signin")
def signin(
    request: Request,
    ctx: Context,
    token: Annotated[str, Form()],
    csrf: Annotated[str | None, Form()] = None,
) -> Response:
    try:
        check_signin_csrf(request.cookies.get(SIGNIN_COOKIE), csrf)
        made = open_session(ctx.store, token.strip(), ctx.clock())
    except NotSignedInError as error:
        return _signin_page(request, str(error), status=401)
    except AccessDeniedError as error:
        return _signin_page(request, str(error), status=403)
    response = RedirectResponse("/", status_code=303)
    set_cookie(request, response, COOKIE, made.cookie, max_age=SESSION_HOURS * 3600, path="/")
    response.delete_cookie(SIGNIN_COOKIE, path="/signin")
    return response


@router.post("/signout")
def signout(request: Request, ctx: Context, signed: Session, csrf: Annotated[str, Form()]) -> Response:
    if signed is not None:
        check_csrf(signed[0], csrf)
        close_session(ctx.store, request.cookies.get(COOKIE))
    response = RedirectResponse("/signin", status_code=303)
    response.delete_cookie(COOKIE, path="/")
    return response


def _require_session(signed: Signed | None, csrf: str) -> Signed:
    if signed is None:
        raise NotSignedInError("sign in first (the session ended or the token was revoked)")
    check_csrf(signed[0], csrf)
    return signed


@router.post("/jobs")
def submit_form(
    request: Request,
    ctx: Context,
    signed: Session,
    csrf: Annotated[str, Form()],
    spec: Annotated[str, Form()],
) -> Response:
    import yaml

    session = _require_session(signed, csrf)
    token = session[1]
    try:
        document = yaml.safe_load(spec)  # YAML or JSON, as `gpuplan submit` reads a file
    except yaml.YAMLError as error:
        return _page(request, ctx, session, message=f"the spec is not YAML or JSON: {error}", status=422)
    try:
        result = ctx.submit(token, document, source="the form")
    except InputError as error:
        return _page(request, ctx, session, message=str(error), status=422)
    except AccessDeniedError as error:
        return _page(request, ctx, session, message=str(error), status=403)
    start = (
        "no start in the next 24 hours"
        if result.planned_start is None
        else f"{result.planned_start:%a %H:%M}"
    )
    return _done(request, f"queued {result.job}: {start}; {result.reason}")


@router.post("/jobs/{job_id}/cancel")
def cancel_form(
    request: Request, job_id: str, ctx: Context, signed: Session, csrf: Annotated[str, Form()]
) -> Response:
    session = _require_session(signed, csrf)
    try:
        job = ctx.cancel(session[1], job_id)
    except InputError as error:
        return _page(request, ctx, session, message=str(error), status=422)
    except AccessDeniedError as error:
        return _page(request, ctx, session, message=str(error), status=403)
    return _done(request, f"cancelled {job.id}")
