"""The bottom floor: the error types every layer raises.

Nothing here imports from any other package of the project, so ``scheduler/``,
``features/``, ``forecasting/``, ``training_data/`` and ``storage/`` can all raise the
same errors without reaching up into the application or the command line.
"""
