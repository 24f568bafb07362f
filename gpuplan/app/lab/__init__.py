"""The lab: the simulated week, the bench, synthetic loads, workloads, backtests, the demo and its seed."""
