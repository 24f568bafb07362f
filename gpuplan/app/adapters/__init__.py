"""The adapters: the executors, the Slurm client and cluster reader, the traffic sources, the metrics."""
