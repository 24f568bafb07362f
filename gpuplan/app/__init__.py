"""The middle floor: the use cases that the command line, the daemon and any later API call.

Each module is one use case (``retrain``, ``tick``, ``submit``, ``status``, ``reports``,
``backtest``) or a piece they share (``bridge`` turns forecasts into a scenario,
``models`` finds the fitted forecasters). Only this floor joins forecasts to scenarios
and scenarios to storage; the packages below it import nothing from here.
"""
