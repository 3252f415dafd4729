"""dlbench: deep-learning benchmarks for GPUs, GPU servers and clusters."""

__version__ = "0.1.0"
