"""gpuplan: the command line and shared errors; the work lives in scheduler/, forecasting/, features/."""
