"""Working state shared by the policies: busy GPUs per step as integer bitmasks.

One int per step makes "is this aligned block free over these steps" a handful of
integer operations, whatever the cluster size (the fast mode's main cost).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from functools import cache

from contract.scenario import BatchJob, Instance, block_mask


@cache
def aligned_starts(cluster_gpus: int, block_gpus: int) -> int:
    """Bitmask with bit ``a`` set for every aligned block start ``a % block_gpus == 0``."""
    mask = 0
    for first in range(0, cluster_gpus - block_gpus + 1, block_gpus):
        mask |= 1 << first
    return mask


def free_block_starts(free: int, cluster_gpus: int, block_gpus: int) -> int:
    """Bit ``a`` set iff the aligned block ``[a, a + block_gpus)`` lies inside ``free``.

    Folding ``x &= x >> k`` with k = 1, 2, 4, ... leaves bit ``a`` set exactly when
    the ``block_gpus`` bits from ``a`` upward were all set.
    """
    for span in _spans(block_gpus):
        free &= free >> span
    return free & aligned_starts(cluster_gpus, block_gpus)


@cache
def _spans(block_gpus: int) -> tuple[int, ...]:
    """The shifts of :func:`free_block_starts`' fold: 1, 2, 4, ... below ``block_gpus``."""
    return tuple(1 << k for k in range(max(0, (block_gpus - 1).bit_length())))


class Board:
    """Which GPUs are taken at each step; starts with down GPUs and running batch jobs."""

    def __init__(self, instance: Instance) -> None:
        self.instance = instance
        self.gpus = instance.gpus
        self.horizon = instance.horizon_steps
        self.all_mask = instance.all_gpus_mask
        self.busy = [d | r for d, r in zip(instance.down_masks, instance.running_masks, strict=True)]

    def free_starts(self, block_gpus: int, start: int, end: int) -> int:
        """Aligned block starts free at every step of ``[start, end)``."""
        taken = 0
        for t in range(start, end):
            taken |= self.busy[t]
        return free_block_starts(~taken & self.all_mask, self.gpus, block_gpus)

    def earliest_run(self, job: BatchJob, not_before: int) -> tuple[int, int, int] | None:
        """``(start, end, block starts)`` of the earliest run of ``job`` from ``not_before`` on
        which some aligned block is free at every step, or None when none fits.

        The run from ``not_before`` is tried first (it usually fits). Otherwise the later starts
        are scanned forward, each step's free blocks ANDed into the run's, and the scan stops at
        the first run that keeps a block. Where none is left at step ``j``, no start up to the
        first step of the longest stretch ending at ``j`` that keeps a block can fit (its run
        covers that stretch and the step before it), so the scan goes on from there with the
        stretch's blocks, found scanning back from ``j``: the same answer as a sliding-window AND
        over every start, with no work past the start found.
        """
        horizon, duration = self.horizon, job.duration_steps
        if not_before >= horizon:
            return None
        end = job.end_step(not_before, horizon)
        # free_block_starts, inlined: this is the fast mode's innermost loop. A block is free at
        # every step of the run iff it is free in the union of the steps' busy GPUs.
        all_mask, busy = self.all_mask, self.busy
        spans, aligned = _spans(job.gpus), aligned_starts(self.gpus, job.gpus)
        taken = 0
        for step_busy in busy[not_before:end]:
            taken |= step_busy
        starts = all_mask & ~taken
        for span in spans:
            starts &= starts >> span
        starts &= aligned
        if starts:
            return not_before, end, starts
        # Steps past the horizon are free: a run cut at the horizon checks only the steps it has.
        free = [0] * horizon  # per step scanned, its free aligned block starts
        start = not_before + 1
        j = start
        run = all_mask
        while start < horizon:
            last = start + duration if start + duration < horizon else horizon
            while j < last:
                f = all_mask & ~busy[j]
                for span in spans:
                    f &= f >> span
                f = free[j] = f & aligned
                run &= f
                if not run:
                    break
                j += 1
            else:
                return start, job.end_step(start, horizon), run
            back = free[j]  # the blocks free from step k + 1 to j
            k = j - 1
            while k >= start and back & free[k]:
                back &= free[k]
                k -= 1
            start, run, j = k + 1, back, j + 1
            if not back:
                start = j
                run = all_mask
        return None

    def occupy(self, mask: int, start: int, end: int) -> None:
        busy = self.busy
        for t in range(start, end):
            busy[t] |= mask

    def occupy_block(self, first_gpu: int, block_gpus: int, start: int, end: int) -> None:
        self.occupy(block_mask(first_gpu, block_gpus), start, end)


class BlockedSchedule:
    """When each GPU is next unavailable to a real-time job (down, or promised to a batch job).

    It says what a real-time job must leave, and how early, given that at most
    ``swap_cap`` of its GPUs may change per step.
    """

    def __init__(self, blocked_masks: Sequence[int]) -> None:
        self.masks = blocked_masks
        ever = 0
        for mask in blocked_masks:
            ever |= mask
        self.ever_down = ever
        # Per step, the GPUs blocked at that step or any later one (suffix unions).
        self.blocked_from: list[int] = [0] * (len(blocked_masks) + 1)
        for t in range(len(blocked_masks) - 1, -1, -1):
            self.blocked_from[t] = self.blocked_from[t + 1] | blocked_masks[t]
        # Each GPU's blocked steps, listed the first time it is asked about: a search asks
        # about few of a large cluster's GPUs.
        self.down_steps: dict[int, list[int]] = {}

    @classmethod
    def of_down_windows(cls, instance: Instance) -> BlockedSchedule:
        return cls(instance.down_masks)

    def never_blocked_after(self, step: int) -> int:
        """Mask of the GPUs that no down window or promise takes from ``step`` on."""
        return ~self.blocked_from[min(step, len(self.masks))]

    def next_down(self, gpu: int, step: int) -> int | None:
        if not self.ever_down >> gpu & 1:
            return None
        steps = self.down_steps.get(gpu)
        if steps is None:
            steps = self.down_steps[gpu] = [t for t, mask in enumerate(self.masks) if mask >> gpu & 1]
        i = bisect_left(steps, step)
        return steps[i] if i < len(steps) else None

    def up_through(self, gpu: int, start: int, end: int) -> bool:
        """Whether ``gpu`` is up at every step of ``[start, end)``."""
        nxt = self.next_down(gpu, start)
        return nxt is None or nxt >= end

    def must_drop(self, held: int, step: int, swap_cap: int) -> int:
        """GPUs of ``held`` to release at ``step`` so that later down windows stay reachable.

        Earliest-deadline-first: with ``N(u)`` the held GPUs down by step ``u``, at most
        ``swap_cap`` can be released per step, so ``N(u) - swap_cap * (u - step)`` of them
        must go now (all of those down at ``step`` itself); the earliest deadlines go, the
        lowest ids first among equal ones. The steps are walked from ``step`` on only until
        no later one can need more.
        """
        pending = held & self.blocked_from[step]
        if not pending:
            return 0
        masks, total = self.masks, pending.bit_count()
        due: list[int] = []  # per step walked, the held GPUs whose deadline it is
        count = needed = 0
        u = step
        while pending:
            new = pending & masks[u]
            if new:
                pending ^= new
                due.append(new)
                count += new.bit_count()
                needed = max(needed, count - swap_cap * (u - step))
            u += 1
            if total - swap_cap * (u - step) <= needed:
                break
        drop = 0
        for gpus in due:
            left = gpus
            while left and needed:
                lowest = left & -left
                drop |= lowest
                left ^= lowest
                needed -= 1
        return drop

    def still_reachable(self, held: int, step: int, swap_cap: int) -> bool:
        """Whether ``held`` at ``step`` can still shed its GPUs before they go down (from step+1 on):
        by every later step ``u``, at most ``swap_cap * (u - step)`` of them are down."""
        pending = held & self.blocked_from[step + 1]
        total, count = pending.bit_count(), 0
        u = step + 1
        while pending:
            if total <= swap_cap * (u - step):
                return True
            new = pending & self.masks[u]
            if new:
                pending ^= new
                count += new.bit_count()
                if count > swap_cap * (u - step):
                    return False
            u += 1
        return True
