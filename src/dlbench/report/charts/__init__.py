"""The report's charts, one module per subject; each builder takes every record of the report
and the command line of each run, and returns its charts (none where its data is absent).
matplotlib is imported only when a builder draws."""

from dlbench.report.charts.base import Builder, Chart, prefix_ids
from dlbench.report.charts.generate import decode_roofline_charts, latency_charts
from dlbench.report.charts.memory import memory_charts
from dlbench.report.charts.mfu import mfu_charts
from dlbench.report.charts.published import published_charts
from dlbench.report.charts.roofline import roofline_charts
from dlbench.report.charts.scaling import interconnect_charts, scaling_charts
from dlbench.report.charts.strategy import strategy_charts
from dlbench.report.charts.telemetry import telemetry_charts
from dlbench.report.charts.throughput import batch_charts, throughput_charts
from dlbench.report.charts.training import training_charts

__all__ = ["Builder", "Chart", "prefix_ids", "batch_charts", "decode_roofline_charts",
           "interconnect_charts", "latency_charts", "memory_charts", "mfu_charts",
           "published_charts", "roofline_charts", "scaling_charts", "strategy_charts",
           "telemetry_charts", "throughput_charts", "training_charts"]
