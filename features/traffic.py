"""Traffic ingestion: hourly request counts for one real-time app.

Two file shapes are read, both CSV with a header row:

- **hourly**: the first column is the hour (a timestamp), the second is ``requests``
  (the count in that hour; other columns are ignored). ServeGen's ``dayDD_hHH`` hour
  labels are accepted and placed on :data:`DAY_HOUR_EPOCH` (see below).
- **per-request records**: one row per request, the first column (or ``timestamp_column``)
  a timestamp; rows are counted per clock hour. Hours between the first and the last
  record with no record are real zero-traffic hours, not gaps.

Gaps and duplicates in an hourly file are repaired *and reported*: a duplicated hour
keeps its last row (a later row is taken as a correction of an earlier one), a missing
hour is linearly interpolated between its neighbours and flagged in ``imputed``. The
:class:`IngestReport` lists both and is logged at WARNING when anything was repaired.

A malformed file raises :class:`contract.errors.InputError` naming the file and line
(line 1 is the header).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from contract.errors import InputError

if TYPE_CHECKING:
    import pandas as pd

logger = logging.getLogger(__name__)

#: ServeGen labels hours ``dayDD_hHH`` from the trace start with an unknown weekday.
#: We place day 00, hour 00 on Monday 2024-01-01 00:00, so weekly slots are only
#: "days since trace start modulo 7": the weekly profile is still well defined, but
#: the weekday names it prints for ServeGen are conventional, not real.
DAY_HOUR_EPOCH = np.datetime64("2024-01-01T00", "h")

_DAY_HOUR = re.compile(r"^day(\d+)_h(\d+)$")
_HOUR = np.timedelta64(1, "h")


class TrafficFormat(Enum):
    HOURLY = "hourly"
    REQUESTS = "per-request records"


@dataclass(frozen=True, slots=True)
class IngestReport:
    """What ingestion found and repaired; nothing is dropped without appearing here."""

    source: str
    file_format: TrafficFormat
    rows_read: int
    hours: int
    first_hour: str
    last_hour: str
    gap_hours: tuple[str, ...] = ()
    duplicate_hours: tuple[str, ...] = ()
    zero_hours: int = 0

    @property
    def repaired(self) -> bool:
        return bool(self.gap_hours or self.duplicate_hours)

    def summary(self) -> str:
        text = (
            f"{self.source}: {self.rows_read} rows ({self.file_format.value}) -> "
            f"{self.hours} hours {self.first_hour} .. {self.last_hour}, "
            f"{self.zero_hours} zero hours"
        )
        if self.gap_hours:
            text += f", {len(self.gap_hours)} missing hours interpolated (first {self.gap_hours[0]})"
        if self.duplicate_hours:
            text += (
                f", {len(self.duplicate_hours)} duplicated hours kept last row "
                f"(first {self.duplicate_hours[0]})"
            )
        return text


@dataclass(frozen=True, slots=True, eq=False)
class HourlyTraffic:
    """A contiguous hourly series: ``hours[i]`` (datetime64[h]) had ``requests[i]``."""

    hours: npt.NDArray[np.datetime64]
    requests: npt.NDArray[np.float64]
    imputed: npt.NDArray[np.bool_]
    report: IngestReport = field(repr=False)

    def __len__(self) -> int:
        return int(self.requests.size)

    def before(self, hour: np.datetime64) -> HourlyTraffic:
        """The history strictly before ``hour`` (what a forecaster at ``hour`` may see)."""
        keep = self.hours < hour
        return HourlyTraffic(self.hours[keep], self.requests[keep], self.imputed[keep], self.report)


def hour_of(value: object) -> np.datetime64:
    """``value`` (str, datetime, datetime64) as a datetime64 floored to the hour."""
    return np.datetime64(value, "m").astype("datetime64[h]")  # type: ignore[call-overload,no-any-return]


def load_traffic(path: Path, *, timestamp_column: str | None = None) -> HourlyTraffic:
    """Read ``path`` (hourly counts or per-request records) into an :class:`HourlyTraffic`."""
    import pandas as pd

    source = str(path)
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    except FileNotFoundError as error:
        raise InputError("traffic", "an existing CSV file", source) from error
    except (pd.errors.EmptyDataError, pd.errors.ParserError) as error:
        raise InputError(
            "traffic", "a CSV file with a header row", str(error).splitlines()[0], source=source
        ) from error
    columns = [str(name) for name in frame.columns]
    if timestamp_column is None and len(columns) >= 2 and columns[1] == "requests":
        return _from_hourly(frame, columns[0], source)
    if timestamp_column is None and "requests" in columns:
        raise InputError(
            "requests",
            "the second column of an hourly file (hour,requests)",
            columns,
            source=source,
            hint="Put the hour first and the request count second.",
        )
    column = timestamp_column or (columns[0] if columns else "")
    if column not in columns:
        raise InputError("timestamp column", f"one of {columns}", column, source=source)
    return _from_records(frame, column, source)


def _line(index: int) -> str:
    # Row 0 of the frame is line 2 of the file: line 1 is the header.
    return f"line {index + 2}"


def _parse_hours(values: pd.Series[str], column: str, source: str) -> npt.NDArray[np.datetime64]:
    import pandas as pd

    text = values.str.strip()
    day_hour = text.str.extract(_DAY_HOUR)
    is_day_hour = day_hour[0].notna().to_numpy()
    stamps = pd.to_datetime(text.where(~is_day_hour), errors="coerce", format="mixed")
    hours = stamps.to_numpy(dtype="datetime64[ns]").astype("datetime64[h]")
    if is_day_hour.any():
        offsets = (
            day_hour.loc[is_day_hour, 0].astype(int) * 24 + day_hour.loc[is_day_hour, 1].astype(int)
        ).to_numpy()
        hours[is_day_hour] = DAY_HOUR_EPOCH + offsets.astype("timedelta64[h]")
    bad = np.flatnonzero(np.isnat(hours))
    if bad.size:
        first = int(bad[0])
        raise InputError(
            column,
            "a timestamp such as 2024-11-15 16:00:00 (or dayDD_hHH)",
            values.iloc[first],
            source=f"{source} {_line(first)}",
        )
    return hours


def _from_hourly(frame: pd.DataFrame, hour_column: str, source: str) -> HourlyTraffic:
    import pandas as pd

    if frame.empty:
        raise InputError("requests", "at least one hourly row", "an empty file", source=source)
    hours = _parse_hours(frame[hour_column], hour_column, source)
    counts = pd.to_numeric(frame["requests"].str.strip(), errors="coerce").to_numpy(float)
    bad = np.flatnonzero(~np.isfinite(counts) | (counts < 0))
    if bad.size:
        first = int(bad[0])
        raise InputError(
            "requests",
            "a non-negative number",
            frame["requests"].iloc[first],
            source=f"{source} {_line(first)}",
        )

    # Stable sort so that, among duplicates, file order decides which row is "last".
    order = np.argsort(hours, kind="stable")
    hours, counts = hours[order], counts[order]
    is_last = np.append(hours[1:] != hours[:-1], True)
    duplicates = np.unique(hours[~is_last])
    hours, counts = hours[is_last], counts[is_last]

    grid = np.arange(hours[0], hours[-1] + _HOUR, _HOUR)
    present = np.isin(grid, hours)
    filled = np.interp(
        grid.astype(np.int64), hours.astype(np.int64), counts
    )  # exact at present hours, linear across gaps
    report = _report(
        source,
        TrafficFormat.HOURLY,
        len(frame),
        grid,
        filled,
        gap_hours=tuple(str(h) for h in grid[~present]),
        duplicate_hours=tuple(str(h) for h in duplicates),
    )
    return HourlyTraffic(grid, filled, ~present, report)


def _from_records(frame: pd.DataFrame, column: str, source: str) -> HourlyTraffic:
    if frame.empty:
        raise InputError(column, "at least one request record", "an empty file", source=source)
    hours = _parse_hours(frame[column], column, source)
    first, last = hours.min(), hours.max()
    offsets = (hours - first).astype(np.int64)
    counts = np.bincount(offsets, minlength=int((last - first).astype(np.int64)) + 1)
    grid = np.arange(first, last + _HOUR, _HOUR)
    report = _report(source, TrafficFormat.REQUESTS, len(frame), grid, counts)
    return HourlyTraffic(grid, counts.astype(float), np.zeros(grid.size, dtype=bool), report)


def _report(
    source: str,
    file_format: TrafficFormat,
    rows_read: int,
    grid: npt.NDArray[np.datetime64],
    counts: npt.ArrayLike,
    *,
    gap_hours: tuple[str, ...] = (),
    duplicate_hours: tuple[str, ...] = (),
) -> IngestReport:
    """The ingestion report for an hourly ``grid`` of ``counts``, logged as it is made."""
    report = IngestReport(
        source=source,
        file_format=file_format,
        rows_read=rows_read,
        hours=int(grid.size),
        first_hour=str(grid[0]),
        last_hour=str(grid[-1]),
        gap_hours=gap_hours,
        duplicate_hours=duplicate_hours,
        zero_hours=int(np.count_nonzero(np.asarray(counts) == 0)),
    )
    _log(report)
    return report


def _log(report: IngestReport) -> None:
    if report.repaired:
        logger.warning("%s", report.summary())
    else:
        logger.info("%s", report.summary())
