"""gpuplan on a Slurm cluster: the command client, the cluster it reads, the executor's parts."""
