"""The daemon's cycle: tick, amend, the traffic step, the outbox, prune and retrain."""
