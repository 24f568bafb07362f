"""The one reader of a user's time (``--at``, ``--since``, config times): ISO 8601, in UTC.

An offset is converted to UTC and a time without one is taken as UTC, as traffic hours
are; the year must lie in ``[FIRST_YEAR, LAST_YEAR]``.
"""

from __future__ import annotations

from datetime import UTC, datetime

from contract.errors import InputError

#: Times a user may name: traffic timestamps (nanoseconds in pandas) end in 2262.
FIRST_YEAR, LAST_YEAR = 1970, 2200
ISO_EXAMPLE = "an ISO 8601 time such as 2026-11-30T14:00"


def parse_time(text: str, field: str = "--at", *, expected: str = ISO_EXAMPLE) -> datetime:
    """``text`` as an aware UTC datetime; InputError naming ``field`` (``expected`` says what fits)."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except (ValueError, AttributeError):
        raise InputError(field, expected, text) from None
    moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    if not FIRST_YEAR <= moment.year <= LAST_YEAR:
        raise InputError(field, f"a time in the years {FIRST_YEAR}-{LAST_YEAR}", text)
    return moment
