"""How long plan runs are kept: the one range ``gpuplan prune --keep-days`` and the config's
``prune_keep_days`` share."""

from __future__ import annotations

from contract.errors import InputError

DEFAULT_KEEP_DAYS = 30
#: The range of ``--keep-days`` and the config's ``prune_keep_days`` (a day to a century).
KEEP_DAYS_RANGE = (1, 36_500)


def checked_keep_days(value: object, name: str) -> int:
    """``value`` as a number of days to keep, in :data:`KEEP_DAYS_RANGE`; InputError naming ``name``."""
    low, high = KEEP_DAYS_RANGE
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InputError(name, f"a whole number of days in [{low}, {high}]", value)
    return value
