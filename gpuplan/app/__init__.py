"""The use cases (the third floor): what the command line, the daemon and any later API call.

Each module is one use case (``retrain``, ``tick``, ``jobs``, ``status``, ``reports``,
``backtest``, ``simulate``, ``service``) or a piece they share (``bridge`` turns forecasts
into a scenario and builds a plan run's record, ``models`` finds the fitted forecasters,
``executors`` runs the commits). Only this floor joins forecasts to scenarios and scenarios
to storage; the packages below it import nothing from here. Errors name the use case's own
fields; each face shows them under its own names.
"""
