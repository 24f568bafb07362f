"""The shared quantile tools: several conformal levels at once agree with one at a time."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from forecasting.quantiles import conformal_quantile, conformal_quantiles

SCORES = st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=60)
LEVELS = st.lists(st.floats(0.01, 0.999), min_size=1, max_size=8)


@given(SCORES, LEVELS)
def test_several_levels_agree_with_one_at_a_time(scores: list[float], levels: list[float]) -> None:
    together = conformal_quantiles(scores, levels)
    assert together.tolist() == [conformal_quantile(scores, level) for level in levels]
    assert all(value in scores for value in together)


def test_the_rank_is_ceil_n_plus_one_times_q_capped_at_the_largest() -> None:
    scores = np.arange(1.0, 10.0)  # nine scores: rank ceil(10 q)
    assert conformal_quantiles(scores, (0.5, 0.85, 0.9, 0.95)).tolist() == [5.0, 9.0, 9.0, 9.0]
    assert conformal_quantiles(scores, (0.1,)).tolist() == [1.0]
    with pytest.raises(ValueError, match=re.escape("conformal_quantile needs at least one score.")):
        conformal_quantiles([], (0.9,))
