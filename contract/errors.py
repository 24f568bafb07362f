"""Errors shared by every package: bad input that the user must fix."""

from __future__ import annotations

from collections.abc import Mapping


class InputError(ValueError):
    """Input that breaks a documented schema.

    The message names where (``source``), which field, what was expected and what
    came, so that the user can fix the file without reading code. The CLI turns it
    into exit code 2. A use case names its own fields (``db``, ``run_id``); each face
    shows them under its own names (:meth:`renamed`: ``--db``, ``RUN_ID``). A field of a
    file (``in_file``: a column or key of the file ``source`` names) is never an argument,
    and keeps its name: a workload's ``gpus`` column is not the ``--gpus`` option.
    """

    def __init__(
        self,
        field: str,
        expected: str,
        got: object,
        *,
        source: str | None = None,
        hint: str | None = None,
        in_file: bool = False,
    ) -> None:
        self.field = field
        self.in_file = in_file
        self.expected = expected
        self.got = got
        self.source = source
        self.hint = hint
        where = f"{source}: " if source else ""
        message = f"{where}`{field}` must be {expected}; got {got!r}."
        if hint:
            message += f" {hint}"
        super().__init__(message)

    def renamed(self, names: Mapping[str, str]) -> InputError:
        """The same error under ``names[field]`` (a face's name for the field), or itself."""
        if self.in_file or self.field not in names:
            return self
        return InputError(names[self.field], self.expected, self.got, source=self.source, hint=self.hint)


class NotFittedError(ValueError, AttributeError):
    """A forecaster used before it was fitted (as scikit-learn's: a ValueError and an AttributeError)."""


class StoreError(RuntimeError):
    """The database could not be reached or refused an operation (not the user's input)."""
