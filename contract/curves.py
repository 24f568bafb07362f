"""The one rule that links demand forecasts and the allocator: what a swap cap lets a count do."""

from __future__ import annotations

from collections.abc import Sequence


def swap_capped_curve(demand: Sequence[int], swap_cap: int, running: int | None = None) -> list[int]:
    """The least GPU count per step, >= demand, that a swap cap of ``swap_cap`` can follow.

    Rises must start early (``c(t) >= c(t+1) - cap``) and falls are slowed
    (``c(t) >= c(t-1) - cap``); a running set of ``running`` GPUs is where it starts.
    Every GPU added or removed is one change, so no curve with fewer GPU-steps that
    covers ``demand`` keeps ``|c(t) - c(t-1)| <= swap_cap``.
    """
    curve = list(demand)
    for t in range(len(curve) - 2, -1, -1):
        curve[t] = max(curve[t], curve[t + 1] - swap_cap)
    previous = running
    for t in range(len(curve)):
        if previous is not None:
            curve[t] = max(curve[t], previous - swap_cap)
        previous = curve[t]
    return curve
