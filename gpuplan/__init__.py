"""gpuplan: the command line and its helpers (the faces); the use cases live in gpuplan/app/."""
