"""Traffic ingestion on the real LoRA, Philly and ServeGen series."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import numpy as np
import pytest

from contract.errors import InputError
from features.traffic import TrafficFormat, load_traffic

TRAFFIC = Path(__file__).resolve().parents[2] / "training_data" / "traffic"
LORA_HOURLY = TRAFFIC / "alibaba_genai_lora_hourly.csv"


def test_per_request_records_count_to_the_published_hourly_series() -> None:
    records = load_traffic(TRAFFIC / "alibaba_genai_lora_requests_week1.csv")
    hourly = load_traffic(LORA_HOURLY)
    assert records.report.file_format is TrafficFormat.REQUESTS
    assert records.report.rows_read == 4060
    np.testing.assert_array_equal(records.hours, hourly.hours[: len(records)])
    np.testing.assert_array_equal(records.requests, hourly.requests[: len(records)])
    assert records.report.zero_hours == 78  # quiet hours are zeros, not gaps
    assert not records.report.gap_hours


def test_hourly_file_is_contiguous_with_no_repairs() -> None:
    traffic = load_traffic(LORA_HOURLY)
    assert len(traffic) == 554
    assert traffic.report.zero_hours == 184
    assert not traffic.report.repaired
    assert np.all(np.diff(traffic.hours) == np.timedelta64(1, "h"))


def test_gaps_and_duplicates_are_repaired_and_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    lines = LORA_HOURLY.read_text().splitlines()
    # Drop 2024-11-19 19:00 (line 101) and repeat 2024-11-19 22:00 with a corrected count.
    header, rows = lines[0], lines[1:]
    dropped = rows.pop(99)
    assert dropped.startswith("2024-11-19 19:00")
    rows.append("2024-11-19 22:00:00,999")
    path = tmp_path / "lora.csv"
    path.write_text("\n".join([header, *rows]) + "\n")
    with caplog.at_level(logging.WARNING, logger="features.traffic"):
        traffic = load_traffic(path)
    assert traffic.report.gap_hours == ("2024-11-19T19",)
    assert traffic.report.duplicate_hours == ("2024-11-19T22",)
    index = int(np.flatnonzero(traffic.hours == np.datetime64("2024-11-19T19"))[0])
    assert traffic.imputed[index]
    assert traffic.requests[index] == pytest.approx(0.5 * (82 + 32))  # neighbours 18:00 and 20:00
    assert traffic.requests[index + 3] == 999  # last row wins
    assert "1 missing hours interpolated" in caplog.text


def test_servegen_day_hour_labels_become_timestamps() -> None:
    # ../shared beside the checkout holds the raw trace (dayDD_hHH labels), as in CI
    shared = (
        Path(__file__).resolve().parents[3] / "shared" / "data" / "traffic" / "servegen_m-large_hourly.csv"
    )
    bundled = load_traffic(TRAFFIC / "servegen_m-large_hourly.csv")
    if shared.exists():
        original = load_traffic(shared)
        np.testing.assert_array_equal(original.hours, bundled.hours)
    assert str(bundled.hours[0]) == "2024-01-01T00"
    assert len(bundled) == 336


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            "hour,requests\n2024-01-01 00:00,5\nnot a time,6\n",
            (
                "line 3: `hour` must be a timestamp such as 2024-11-15 16:00:00 (or dayDD_hHH); "
                "got 'not a time'."
            ),
        ),
        (
            "hour,requests\n2024-01-01 00:00,5\n2024-01-01 01:00,-1\n",
            "line 3: `requests` must be a non-negative number (at most 1e+12); got '-1'.",
        ),
        (
            "hour,count,requests\n2024-01-01 00:00,5,5\n",
            (
                "`header` must be `hour,requests` (hourly counts; more columns may follow) or "
                "`timestamp,...` (one row per request; `gmt_create` also accepted); got 'hour,count,requests'."
            ),
        ),
    ],
)
def test_malformed_files_name_the_line(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(content)
    with pytest.raises(InputError, match=re.escape(message)):
        load_traffic(path)
