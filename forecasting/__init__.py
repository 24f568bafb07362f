"""Forecasters: batch-job needs (training, quantization) and real-time demand."""
