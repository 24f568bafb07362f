"""The daemon's cycle: tick, amend, the traffic step, the outbox, the cluster's truth, prune and retrain."""
