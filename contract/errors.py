"""Errors shared by every package: bad input that the user must fix."""

from __future__ import annotations


class InputError(ValueError):
    """Input that breaks a documented schema.

    The message names where (``source``), which field, what was expected and what
    came, so that the user can fix the file without reading code. The CLI turns it
    into exit code 2.
    """

    def __init__(
        self,
        field: str,
        expected: str,
        got: object,
        *,
        source: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.field = field
        self.expected = expected
        self.got = got
        self.source = source
        where = f"{source}: " if source else ""
        message = f"{where}`{field}` must be {expected}; got {got!r}."
        if hint:
            message += f" {hint}"
        super().__init__(message)


class NotFittedError(ValueError, AttributeError):
    """A forecaster used before it was fitted (as scikit-learn's: a ValueError and an AttributeError)."""


class StoreError(RuntimeError):
    """The database could not be reached or refused an operation (not the user's input)."""
