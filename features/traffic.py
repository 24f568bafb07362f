"""Traffic ingestion: hourly request counts for one real-time app.

The layout is declared by the header, never guessed. Two are read, both UTF-8 CSV
(read by :mod:`contract.files`):

- **hourly**: the header starts ``hour,requests``. ``hour`` is an ISO 8601 time (UTC
  unless it carries an offset, which is converted), ``requests``
  the count in that hour (a number in ``[0, 1e12]``); further columns are ignored.
  ServeGen's ``dayDD_hHH`` hour labels are accepted and placed on
  :data:`DAY_HOUR_EPOCH` (see below). A file whose count column has another name is
  read with ``requests_column`` (``--column NAME``): the first column is then the hour.
- **per-request records**: the first column is named ``timestamp`` (or ``gmt_create``,
  as in Alibaba's exports), one row per request; rows are counted per clock hour.
  Hours between the first and the last record with no record are real zero-traffic
  hours, not gaps. Another name for the timestamp column is given with
  ``timestamp_column``.

Any other header is an error that lists both layouts: a CSV without a header, or one
such as ``hour,active,total``, would otherwise be read as something it is not. A series
may span at most :data:`MAX_SERIES_HOURS`.

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
from contract.files import read_csv
from contract.times import parse_time

if TYPE_CHECKING:
    import pandas as pd

logger = logging.getLogger(__name__)

#: ServeGen labels hours ``dayDD_hHH`` from the trace start with an unknown weekday.
#: We place day 00, hour 00 on Monday 2024-01-01 00:00, so weekly slots are only
#: "days since trace start modulo 7": the weekly profile is still well defined, but
#: the weekday names it prints for ServeGen are conventional, not real.
DAY_HOUR_EPOCH = np.datetime64("2024-01-01T00", "h")

# At most 9,999 days (the series span is bounded anyway) and hours 00-23.
_DAY_HOUR = re.compile(r"^day(\d{1,4})_h([01]\d|2[0-3])$")
_HOUR = np.timedelta64(1, "h")

HOURLY_HEADER = ("hour", "requests")
#: First-column names that declare one row per request.
REQUEST_TIMESTAMP_COLUMNS = ("timestamp", "gmt_create")
#: Two years of hours: a longer span (or two rows decades apart) is not one series.
MAX_SERIES_HOURS = 2 * 365 * 24
#: Requests in one hour; far above any real service, low enough that sums stay exact.
MAX_REQUESTS_PER_HOUR = 1e12
LAYOUTS = (
    "`hour,requests` (hourly counts; more columns may follow) or "
    "`timestamp,...` (one row per request; `gmt_create` also accepted)"
)


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


#: A forecast from less history than this is weak: not one daily cycle has been seen.
MIN_CONFIDENT_HISTORY_HOURS = 24
#: A forecast starting further than this past the last observed hour is weak: the
#: level may have moved since, and nothing in the history can say so.
MAX_CONFIDENT_LEAD_HOURS = 7 * 24


def forecast_caveats(history: HourlyTraffic, at: np.datetime64) -> list[str]:
    """Why a forecast made at ``at`` from ``history`` (the hours before it) is weak, if it is."""
    caveats = []
    if len(history) < MIN_CONFIDENT_HISTORY_HOURS:
        caveats.append(
            f"{history.report.source}: only {len(history)} hours of history before {at} "
            f"(under {MIN_CONFIDENT_HISTORY_HOURS}); the forecast has not seen one daily cycle"
        )
    if len(history):
        lead = int((at - history.hours[-1]) // _HOUR) - 1
        if lead > MAX_CONFIDENT_LEAD_HOURS:
            caveats.append(
                f"{history.report.source}: the forecast starts {lead} hours after the history ends "
                f"({history.hours[-1]}), more than a week; recent traffic is unknown"
            )
    return caveats


def parse_hour(text: str, field: str) -> np.datetime64:
    """A user's ISO 8601 time (``2024-12-01``, ``2024-12-01 16:30``) floored to the hour
    (read by :func:`contract.times.parse_time`: an offset converted to UTC, none means UTC)."""
    moment = parse_time(text, field, expected="a time such as 2024-12-01 or 2024-12-01 16:00")
    return hour_of(moment.replace(tzinfo=None))


def hour_of(value: object) -> np.datetime64:
    """``value`` (str, datetime, datetime64) as a datetime64 floored to the hour."""
    return np.datetime64(value, "m").astype("datetime64[h]")  # type: ignore[call-overload,no-any-return]


def load_traffic(
    path: Path, *, requests_column: str | None = None, timestamp_column: str | None = None
) -> HourlyTraffic:
    """Read ``path`` into an :class:`HourlyTraffic`; the header declares the layout.

    ``requests_column`` reads an hourly file whose count column has that name (the
    first column is the hour); ``timestamp_column`` reads per-request records whose
    timestamps are in that column.
    """
    source = str(path)
    frame = read_csv(path, "traffic", dtype=str, keep_default_na=False)
    frame.columns = [str(name).strip() for name in frame.columns]
    columns = list(frame.columns)
    if requests_column is not None:
        if requests_column not in columns[1:]:
            raise InputError(
                "--column",
                f"a column after the first (the hour) of {columns}",
                requests_column,
                source=source,
            )
        return _from_hourly(frame, columns[0], requests_column, source)
    if timestamp_column is not None:
        if timestamp_column not in columns:
            raise InputError("timestamp column", f"one of {columns}", timestamp_column, source=source)
        return _from_records(frame, timestamp_column, source)
    if tuple(columns[:2]) == HOURLY_HEADER:
        return _from_hourly(frame, "hour", "requests", source)
    if columns and columns[0] in REQUEST_TIMESTAMP_COLUMNS:
        return _from_records(frame, columns[0], source)
    raise InputError(
        "header",
        LAYOUTS,
        ",".join(columns[:6]) + (",..." if len(columns) > 6 else ""),
        source=source,
        hint="Rename the header, or pass `--column NAME` to read column NAME as the hourly count "
        "(the first column is then the hour).",
    )


def _line(index: int) -> str:
    # Row 0 of the frame is line 2 of the file: line 1 is the header.
    return f"line {index + 2}"


def _parse_hours(values: pd.Series[str], column: str, source: str) -> npt.NDArray[np.datetime64]:
    import pandas as pd

    text = values.str.strip()
    day_hour = text.str.extract(_DAY_HOUR)
    is_day_hour = day_hour[0].notna().to_numpy()
    # ISO 8601 only: "mixed" would read 01/02 as January and 13/02 as February in one file.
    # A UTC offset is converted to UTC; a time without one is taken as UTC.
    stamps = pd.to_datetime(text.where(~is_day_hour), errors="coerce", format="ISO8601", utc=True)
    hours = stamps.dt.tz_localize(None).to_numpy(dtype="datetime64[ns]").astype("datetime64[h]")
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


def _from_hourly(frame: pd.DataFrame, hour_column: str, count_column: str, source: str) -> HourlyTraffic:
    import pandas as pd

    if frame.empty:
        raise InputError(count_column, "at least one hourly row", "an empty file", source=source)
    hours = _parse_hours(frame[hour_column], hour_column, source)
    counts = pd.to_numeric(frame[count_column].str.strip(), errors="coerce").to_numpy(float)
    bad = np.flatnonzero(~np.isfinite(counts) | (counts < 0) | (counts > MAX_REQUESTS_PER_HOUR))
    if bad.size:
        first = int(bad[0])
        raise InputError(
            count_column,
            f"a non-negative number (at most {MAX_REQUESTS_PER_HOUR:g})",
            frame[count_column].iloc[first],
            source=f"{source} {_line(first)}",
        )

    # Stable sort so that, among duplicates, file order decides which row is "last".
    order = np.argsort(hours, kind="stable")
    hours, counts = hours[order], counts[order]
    is_last = np.append(hours[1:] != hours[:-1], True)
    duplicates = np.unique(hours[~is_last])
    hours, counts = hours[is_last], counts[is_last]

    _check_span(hours[0], hours[-1], source)
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
    _check_span(first, last, source)
    offsets = (hours - first).astype(np.int64)
    counts = np.bincount(offsets, minlength=int((last - first).astype(np.int64)) + 1)
    grid = np.arange(first, last + _HOUR, _HOUR)
    report = _report(source, TrafficFormat.REQUESTS, len(frame), grid, counts)
    return HourlyTraffic(grid, counts.astype(float), np.zeros(grid.size, dtype=bool), report)


def _check_span(first: np.datetime64, last: np.datetime64, source: str) -> None:
    hours = int((last - first) // _HOUR) + 1
    if hours > MAX_SERIES_HOURS:
        raise InputError(
            "hours",
            f"a series of at most {MAX_SERIES_HOURS:,} hours (two years)",
            f"{first} .. {last} ({hours:,} hours)",
            source=source,
            hint="Keep the recent part of the series.",
        )


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
