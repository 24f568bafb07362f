"""From forecast requests to a GPU curve the app's swap cap allows.

Two steps, both pure functions on arrays:

1. **Need**: ``need(t) = ceil(p90(t) * (1 + headroom) / requests_per_gpu_hour)``, the
   GPUs that serve the upper forecast at the latency target with a safety margin.
2. **Swap cap**: the allocator may change at most ``swap_cap`` GPUs between two
   consecutive hours (CONTRACT.md, constraint 4: ``|A(t) Δ A(t-1)| <= swap_cap``). A
   count curve ``c`` can be realised by adding or releasing GPUs only, which changes
   the set by exactly ``|c(t) - c(t-1)|``, so the curve must satisfy
   ``|c(t) - c(t-1)| <= swap_cap``. The smallest such curve that never drops below the
   need is ``c(t) = max_j need(j) - swap_cap * |t - j|``: every rise is started early
   enough to reach the peak in time, and every fall is slowed down. It is the 1-D
   distance transform with an L1 cone (Felzenszwalb & Huttenlocher 2012), computed in
   one forward and one backward pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from contract import curves
from contract.errors import InputError

IntArray = npt.NDArray[np.int64]

#: Far above any cluster, far below the int64 the curve is kept in.
MAX_GPUS_NEEDED = 2**31


@dataclass(frozen=True, slots=True)
class AppCapacity:
    """One real-time app's serving capacity and churn limit."""

    requests_per_gpu_hour: float
    headroom: float = 0.0
    swap_cap: int = 2

    @property
    def regrow(self) -> float:
        """The requests one swap-cap step of GPUs serves (headroom kept): what the swap cap
        can add back in an hour, and so how fast the reserve may fall (the dip hold)."""
        return self.swap_cap * self.requests_per_gpu_hour / (1.0 + self.headroom)

    def __post_init__(self) -> None:
        if not self.requests_per_gpu_hour > 0:
            raise InputError("requests_per_gpu_hour", "a number > 0", self.requests_per_gpu_hour)
        if self.headroom < 0:
            raise InputError("headroom", "a fraction >= 0 (0.2 = 20% above P90)", self.headroom)
        if self.swap_cap < 0:
            raise InputError("swap_cap", "an integer >= 0", self.swap_cap)


def gpus_needed(requests: npt.ArrayLike, requests_per_gpu_hour: float, headroom: float = 0.0) -> IntArray:
    """GPUs needed per hour to serve ``requests`` with ``headroom`` to spare."""
    load = np.asarray(requests, dtype=float) * (1.0 + headroom) / requests_per_gpu_hour
    # A tiny capacity would need more GPUs than an integer holds (ceil(inf) is no count).
    if not np.all(np.isfinite(load)) or np.max(load, initial=0.0) > MAX_GPUS_NEEDED:
        raise InputError(
            "requests_per_gpu_hour",
            f"large enough that at most {MAX_GPUS_NEEDED:,} GPUs are needed in an hour",
            requests_per_gpu_hour,
        )
    # The tolerance keeps 2.0000000001 GPUs (float noise) from costing a third GPU.
    return np.ceil(load - 1e-9).clip(min=0).astype(np.int64)


def gpu_curve(p90_requests: npt.ArrayLike, capacity: AppCapacity) -> IntArray:
    """P90 requests per hour -> GPUs per hour within the app's swap cap."""
    need = gpus_needed(p90_requests, capacity.requests_per_gpu_hour, capacity.headroom)
    # The allocator's own rule (contract/curves.py), so that forecast and optimizer agree on what churn costs.
    return np.asarray(curves.swap_capped_curve([int(n) for n in need], capacity.swap_cap), dtype=np.int64)


def chain_daily_plans(plans: npt.ArrayLike, swap_cap: int) -> IntArray:
    """Join consecutive day-ahead plans (rows) into one curve the swap cap allows.

    Each row was capped on its own, so only the hour after a boundary can break the cap.
    There the allocation moves from the previous hour's by at most ``swap_cap`` toward
    the new plan, and keeps converging in the following hours; a plan that starts high
    is then under-served for a few hours (a pre-ramp would need the next day's forecast
    before its origin). Without lookahead this is what an allocator could really do.
    """
    rows = np.asarray(plans, dtype=np.int64)
    planned = rows.ravel()
    curve = planned.copy()
    for t in range(1, curve.size):
        curve[t] = min(max(planned[t], curve[t - 1] - swap_cap), curve[t - 1] + swap_cap)
    chained: IntArray = curve.reshape(rows.shape)
    return chained
