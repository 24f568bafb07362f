"""The use cases (the third floor): what the command line, the daemon and the HTTP API call.

They sit in wings, each a package, bottom first: ``core`` (config, bridge, models, tokens,
the executor port), ``adapters`` (executors, Slurm, Prometheus, metrics), ``views`` (status,
reports, dashboard), ``cycle`` (tick, amend, outbox, prune, retrain), ``jobs`` (submit,
batcher, promises) and ``lab`` (simulation, bench, demo); ``service`` assembles the running
service. A wing imports only the wings below it (docs/architecture.md). The packages below
this floor import nothing from here. Errors name the use case's own fields; each face shows
them under its own names.
"""
