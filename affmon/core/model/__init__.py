"""What a machine and its processes are: CPU sets, the topology, samples and the rates
between two, the jobs (a rank and its workers), the process tree, the placement context
(Slurm, Kubernetes), the training loop's breakdown. Imports nothing else of the core but
``affmon.core.errors`` and ``affmon.core.fmt``."""
