"""Requests -> GPUs under the swap cap (CONTRACT.md constraint 4)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from contract.curves import swap_capped_curve
from contract.errors import InputError
from forecasting.gpu_mapping import (
    AppCapacity,
    chain_daily_plans,
    gpu_curve,
    gpus_needed,
)


@given(
    need=st.lists(st.integers(min_value=0, max_value=40), min_size=1, max_size=48),
    swap_cap=st.integers(min_value=0, max_value=6),
)
def test_curve_covers_need_and_respects_swap_cap(need: list[int], swap_cap: int) -> None:
    curve = np.asarray(swap_capped_curve(need, swap_cap))
    assert np.all(curve >= np.asarray(need))
    assert np.all(np.abs(np.diff(curve)) <= swap_cap)
    # Minimal: lowering any single hour breaks coverage or the cap.
    for t in range(curve.size):
        if curve[t] > need[t]:
            lowered = curve.copy()
            lowered[t] -= 1
            assert np.any(np.abs(np.diff(lowered)) > swap_cap)


def test_rise_is_started_early_enough() -> None:
    # The example: 2 GPUs at night, 6 at midday, swap cap 2.
    curve = np.asarray(swap_capped_curve([2, 2, 2, 2, 6, 6, 2, 2], 2))
    np.testing.assert_array_equal(curve, [2, 2, 2, 4, 6, 6, 4, 2])


def test_headroom_and_capacity_round_up() -> None:
    np.testing.assert_array_equal(gpus_needed([0, 100, 101, 250], 100.0, 0.0), [0, 1, 2, 3])
    np.testing.assert_array_equal(gpus_needed([100], 100.0, 0.2), [2])
    curve = gpu_curve([100, 900, 100], AppCapacity(100.0, headroom=0.0, swap_cap=4))
    np.testing.assert_array_equal(curve, [5, 9, 5])


def test_capacity_rejects_nonsense() -> None:
    with pytest.raises(InputError, match=re.escape("`requests_per_gpu_hour` must be a number > 0; got 0.0.")):
        AppCapacity(0.0)
    with pytest.raises(InputError, match=re.escape("`swap_cap` must be an integer >= 0; got -1.")):
        AppCapacity(10.0, swap_cap=-1)


@given(
    plans=st.lists(
        st.lists(st.integers(min_value=0, max_value=30), min_size=6, max_size=6),
        min_size=1,
        max_size=5,
    ),
    swap_cap=st.integers(min_value=1, max_value=4),
)
def test_chained_daily_plans_respect_the_cap_across_days(plans: list[list[int]], swap_cap: int) -> None:
    daily = np.array([swap_capped_curve(day, swap_cap) for day in plans])
    chained = chain_daily_plans(daily, swap_cap)
    assert chained.shape == daily.shape
    assert np.all(np.abs(np.diff(chained.ravel())) <= swap_cap)
    np.testing.assert_array_equal(chained[0], daily[0])  # the first day is untouched
