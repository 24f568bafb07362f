"""Who may do what: API tokens, their teams, scopes and priority caps, and dashboard sessions.

A token is ``secrets.token_urlsafe(32)``, shown once; the store keeps its SHA-256 only, and
a presented token is found by its hash and compared in constant time. ``admin`` includes
``submit`` and ``read``; ``submit`` includes ``read``.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re
import secrets
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from contract.errors import InputError
from contract.records import ApiToken, Job, Scope, WebSession
from contract.scenario_io import MAX_PRIORITY
from storage.store import Store

TEAM = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
#: What each scope grants, beyond itself.
INCLUDES: dict[Scope, frozenset[Scope]] = {
    Scope.READ: frozenset({Scope.READ}),
    Scope.SUBMIT: frozenset({Scope.SUBMIT, Scope.READ}),
    Scope.ADMIN: frozenset({Scope.ADMIN, Scope.SUBMIT, Scope.READ}),
}
SESSION_HOURS = 12


class NotSignedInError(PermissionError):
    """No token, or one that is unknown or revoked (HTTP 401)."""


class AccessDeniedError(PermissionError):
    """A token that may not do this: wrong scope, another team's job, a priority above the cap (HTTP 403)."""


class NotFoundError(InputError, LookupError):
    """An id that names nothing stored (HTTP 404)."""


def sha256_hex(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def parse_scopes(text: str | Iterable[str], field: str = "--scopes") -> frozenset[Scope]:
    names = [s.strip() for s in text.split(",")] if isinstance(text, str) else list(text)
    known = [s.value for s in Scope]
    if not names or any(name not in known for name in names):
        raise InputError(
            field, f"a comma-separated list of {known}", text if isinstance(text, str) else names
        )
    return frozenset(Scope(name) for name in names)


@dataclass(frozen=True)
class NewToken:
    token: ApiToken
    secret: str  # shown once, never stored


def create_token(
    store: Store, team: str, scopes: frozenset[Scope], max_priority: float | None, now: datetime
) -> NewToken:
    if not TEAM.match(team):
        raise InputError(
            "--team", "1-64 letters, digits, '.', '_' or '-', starting with a letter or digit", team
        )
    if max_priority is not None and not (math.isfinite(max_priority) and 0 < max_priority <= MAX_PRIORITY):
        raise InputError("--max-priority", f"a finite number in (0, {MAX_PRIORITY:g}]", max_priority)
    secret = secrets.token_urlsafe(32)
    token = ApiToken(
        id=secrets.token_hex(6),
        secret_sha256=sha256_hex(secret),
        team=team,
        scopes=scopes,
        max_priority=max_priority,
        created_at=now,
    )
    store.add_token(token)
    return NewToken(token, secret)


def token_summary(token: ApiToken) -> dict[str, object]:
    """A token as ``token list --json`` shows it: never its hash."""
    return {
        "id": token.id,
        "team": token.team,
        "scopes": sorted(s.value for s in token.scopes),
        "max_priority": token.max_priority,
        "created_at": token.created_at.isoformat(),
        "revoked_at": None if token.revoked_at is None else token.revoked_at.isoformat(),
    }


class TokenCache:
    """Tokens by hash, kept while no token is revoked: each lookup is given the store's count
    of revoked tokens as of its request (the last of :meth:`~storage.store.Store.marks`), and
    a count that moved empties the cache, so a revoke, by any process, is seen at once.

    The first lookup after the cache was emptied reads every token in one query (the others
    wait for it): fifty clients signing in together cost one read, not fifty. A hash still
    unknown (a token created since, or no token at all) is looked up alone, every time."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._loading = threading.Lock()  # one read of every token at a time
        self._revoked: int | None = None
        self._loaded: int | None = None  # the revoked count the tokens were all read at
        self._known: dict[str, ApiToken] = {}

    def known(self, secret_sha256: str, revoked: int) -> ApiToken | None:
        """The token kept for this hash, if any (never reads the store)."""
        with self._lock:
            if revoked != self._revoked:
                self._known.clear()
                self._revoked = revoked
            return self._known.get(secret_sha256)

    def lookup(self, secret_sha256: str, revoked: int) -> ApiToken | None:
        token = self.known(secret_sha256, revoked)
        if token is not None:
            return token
        with self._loading:
            if self._loaded != revoked:
                self._keep(self.store.tokens(), revoked)
                self._loaded = revoked
        token = self.known(secret_sha256, revoked)
        if token is None:
            token = self.store.token_by_hash(secret_sha256)
            if token is not None:
                self._keep([token], revoked)
        return token

    def _keep(self, tokens: list[ApiToken], revoked: int) -> None:
        with self._lock:
            if self._revoked == revoked:
                self._known.update((t.secret_sha256, t) for t in tokens)


def authenticate(
    store: Store, secret: str | None, lookup: Callable[[str], ApiToken | None] | None = None
) -> ApiToken:
    """The live token whose secret this is; NotSignedInError otherwise. ``lookup`` finds a
    token by its hash instead of the store (a :class:`TokenCache`'s)."""
    if not secret:
        raise NotSignedInError("a bearer token is required (Authorization: Bearer TOKEN)")
    digest = sha256_hex(secret)
    token = (lookup or store.token_by_hash)(digest)
    # The lookup is by hash; the compare is constant-time all the same.
    if token is None or not hmac.compare_digest(token.secret_sha256, digest):
        raise NotSignedInError("the token is not known")
    if token.revoked_at is not None:
        raise NotSignedInError(f"token {token.id} was revoked at {token.revoked_at.isoformat()}")
    return token


def grants(token: ApiToken, scope: Scope) -> bool:
    return any(scope in INCLUDES[held] for held in token.scopes)


def require(token: ApiToken, scope: Scope) -> ApiToken:
    if not grants(token, scope):
        held = ",".join(sorted(s.value for s in token.scopes))
        raise AccessDeniedError(f"token {token.id} has scopes {held}; this needs {scope.value}")
    return token


def require_job(token: ApiToken, job: Job) -> None:
    """A submit token acts on its own team's jobs only; admin on any."""
    require(token, Scope.SUBMIT)
    if not grants(token, Scope.ADMIN) and job.team != token.team:
        owner = (
            "no team (it was submitted from the command line)" if job.team is None else f"team {job.team!r}"
        )
        raise AccessDeniedError(
            f"job {job.id} belongs to {owner}; token {token.id} of team {token.team!r} may act on "
            "its own team's jobs only (an admin token acts on any)"
        )


def require_priority(token: ApiToken, priority: float) -> None:
    if token.max_priority is not None and priority > token.max_priority:
        raise AccessDeniedError(
            f"priority {priority:g} is above team {token.team}'s cap of {token.max_priority:g} "
            f"(token {token.id})"
        )


# -- dashboard sessions ------------------------------------------------------------------


@dataclass(frozen=True)
class SignedIn:
    cookie: str  # for the browser only; the store keeps its hash
    session: WebSession
    token: ApiToken


def open_session(store: Store, secret: str, now: datetime) -> SignedIn:
    token = require(authenticate(store, secret), Scope.READ)
    cookie = secrets.token_urlsafe(32)
    session = WebSession(
        id_sha256=sha256_hex(cookie),
        token_id=token.id,
        csrf=secrets.token_urlsafe(24),
        created_at=now,
        expires_at=now + timedelta(hours=SESSION_HOURS),
    )
    store.add_web_session(session)
    return SignedIn(cookie, session, token)


def session_of(store: Store, cookie: str | None, now: datetime) -> tuple[WebSession, ApiToken] | None:
    """The live session behind a cookie and its token (None: signed out, expired or revoked)."""
    if not cookie:
        return None
    found = store.web_session(sha256_hex(cookie))
    if found is None:
        return None
    session, token = found
    if session.expires_at <= now or token.revoked_at is not None:
        return None
    return session, token


def signin_csrf() -> str:
    """A fresh CSRF token for the sign-in form, sent twice: in a cookie and in the form."""
    return secrets.token_urlsafe(24)


def check_signin_csrf(cookie: str | None, presented: str | None) -> None:
    """The sign-in form's CSRF token must match the one its page set in the cookie (a page
    elsewhere can post a form, but cannot read or set this site's cookie)."""
    if not cookie or not presented or not hmac.compare_digest(cookie, presented):
        raise AccessDeniedError("the sign-in form's CSRF token does not match; reload the page")


def check_csrf(session: WebSession, presented: str | None) -> None:
    if not presented or not hmac.compare_digest(session.csrf, presented):
        raise AccessDeniedError("the form's CSRF token does not match this session; reload the page")


def close_session(store: Store, cookie: str | None) -> None:
    if cookie:
        store.end_web_session(sha256_hex(cookie))
