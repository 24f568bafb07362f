"""The surge table's series (benchmarks/surge_table): the held-out-3 set's LoRA class series."""

from __future__ import annotations

from pathlib import Path

from benchmarks.surge_table import _lora_class
from features.traffic import load_traffic


def test_a_lora_class_is_counted_per_hour_over_the_whole_traces_hours(tmp_path: Path) -> None:
    """One predict_type's requests per hour, every hour from the trace's first request to its
    last (of any type) present, those with none of the type at 0."""
    trace = tmp_path / "requests.csv"
    trace.write_text(
        "gmt_create,predict_type,predict_status\n"
        "2024-11-15 16:10:00,TXT_2_IMG,SUCCEED\n"
        "2024-11-15 17:05:00,IMG_2_IMG,SUCCEED\n"
        "2024-11-15 17:55:00,IMG_2_IMG,FAILED\n"
        "2024-11-15 19:30:00,IMG_2_IMG,SUCCEED\n"
        "2024-11-15 20:01:00,TXT_2_IMG,SUCCEED\n"
    )
    traffic = load_traffic(_lora_class(trace, "IMG_2_IMG", tmp_path / "img.csv"))
    assert [str(hour)[11:13] for hour in traffic.hours] == ["16", "17", "18", "19", "20"]
    assert [float(v) for v in traffic.requests] == [0.0, 2.0, 0.0, 1.0, 0.0]
