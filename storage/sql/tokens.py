"""API tokens and dashboard sessions: the SQL store's token aggregate.

Only hashes are stored: a token's secret and a session's cookie never reach the database.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, select

from contract.errors import InputError
from contract.records import ApiToken, Scope, WebSession
from storage.sql.engine import SqlBase
from storage.tables import TokenRow, WebSessionRow


def _token(row: TokenRow) -> ApiToken:
    return ApiToken(
        id=row.id,
        secret_sha256=row.secret_sha256,
        team=row.team,
        scopes=frozenset(Scope(s) for s in row.scopes.split(",") if s),
        max_priority=row.max_priority,
        created_at=row.created_at,
        revoked_at=row.revoked_at,
    )


class TokenStore(SqlBase):
    """API tokens (hashed) and the dashboard sessions opened with them."""

    def add_token(self, token: ApiToken) -> None:
        with self._session() as session:
            session.add(
                TokenRow(
                    id=token.id,
                    secret_sha256=token.secret_sha256,
                    team=token.team,
                    scopes=",".join(sorted(s.value for s in token.scopes)),
                    max_priority=token.max_priority,
                    created_at=token.created_at,
                    revoked_at=token.revoked_at,
                )
            )

    def tokens(self) -> list[ApiToken]:
        with self._session(read_only=True) as session:
            rows = session.scalars(select(TokenRow).order_by(TokenRow.created_at, TokenRow.id))
            return [_token(row) for row in rows]

    def token_by_hash(self, secret_sha256: str) -> ApiToken | None:
        with self._session(read_only=True) as session:
            row = session.scalar(select(TokenRow).where(TokenRow.secret_sha256 == secret_sha256))
            return None if row is None else _token(row)

    def revoke_token(self, token_id: str, at: datetime) -> ApiToken:
        """Mark the token revoked (kept, so that its id is not reused) and end its sessions."""
        with self._session() as session:
            row = session.get(TokenRow, token_id)
            if row is None:
                raise InputError("ID", "the id of a stored token (`gpuplan token list`)", token_id)
            if row.revoked_at is None:
                row.revoked_at = at
            session.execute(delete(WebSessionRow).where(WebSessionRow.token_id == token_id))
            session.flush()
            return _token(row)

    def add_web_session(self, web_session: WebSession) -> None:
        with self._session() as session:
            session.execute(delete(WebSessionRow).where(WebSessionRow.expires_at <= web_session.created_at))
            session.add(
                WebSessionRow(
                    id_sha256=web_session.id_sha256,
                    token_id=web_session.token_id,
                    csrf=web_session.csrf,
                    created_at=web_session.created_at,
                    expires_at=web_session.expires_at,
                )
            )

    def web_session(self, id_sha256: str) -> tuple[WebSession, ApiToken] | None:
        with self._session(read_only=True) as session:
            found = session.execute(
                select(WebSessionRow, TokenRow)
                .join(TokenRow, TokenRow.id == WebSessionRow.token_id)
                .where(WebSessionRow.id_sha256 == id_sha256)
            ).first()
            if found is None:
                return None
            row, token = found
            return (
                WebSession(row.id_sha256, row.token_id, row.csrf, row.created_at, row.expires_at),
                _token(token),
            )

    def end_web_session(self, id_sha256: str) -> None:
        with self._session() as session:
            session.execute(delete(WebSessionRow).where(WebSessionRow.id_sha256 == id_sha256))
