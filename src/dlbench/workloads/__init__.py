"""Workloads: what is run and timed (throughput today; scaling, comm, peak, tta later)."""
