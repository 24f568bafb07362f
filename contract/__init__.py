"""The bottom floor, the shared vocabulary (docs/architecture.md).

The error types every layer raises, the file formats and their one reader and writer,
times, the scenario model with the one job-kind enum, the scenario and plan formats, the
domain records and the swap-cap curve rule. Nothing here imports from any other package
of the project, so every floor above speaks it without reaching up.
"""
