"""Measurement: one timer, statistics, stopping rule, memory, FLOPs."""
