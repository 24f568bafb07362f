"""The two quantile tools every forecaster here shares: the split-conformal quantile
and the pinball loss."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt


def conformal_quantile(scores: npt.ArrayLike, quantile: float) -> float:
    """The ``ceil((n + 1) q)``-th smallest score (the largest when that exceeds ``n``).

    Split-conformal (Vovk et al. 2005; Lei et al. 2018): added to a forecast, it covers a
    new case exchangeable with the scored ones with probability at least ``q``.
    """
    values = np.asarray(scores, dtype=float)
    if values.size == 0:
        raise ValueError("conformal_quantile needs at least one score.")
    ordered = np.sort(values)
    rank = min(ordered.size, math.ceil((ordered.size + 1) * quantile))
    return float(ordered[rank - 1])


def pinball_loss(actual: npt.ArrayLike, predicted: npt.ArrayLike, quantile: float) -> float:
    """Mean quantile loss: ``q (y - p)`` above the prediction, ``(1 - q)(p - y)`` below
    (Koenker & Bassett 1978; a proper scoring rule for a quantile, Gneiting & Raftery 2007)."""
    difference = np.asarray(actual, dtype=float) - np.asarray(predicted, dtype=float)
    return float(np.mean(np.maximum(quantile * difference, (quantile - 1.0) * difference)))
