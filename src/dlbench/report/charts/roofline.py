"""The roofline chart (from throughput records, with peak records for measured roofs): the same
figure as ``dlbench roofline`` (:func:`dlbench.report.plots.roofline_figure`), one per device."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from dlbench.measure.mfu import device_key
from dlbench.measure.roofline import point_for, roofs_for
from dlbench.models.errors import UnknownModelError
from dlbench.report.charts.base import Chart, commands_of, finish, newest, pyplot
from dlbench.report.plots import roofline_figure


def roofline_charts(records: Sequence[Any], commands: Mapping[str, str]) -> list[Chart]:
    """Per device: the two roofs (measured where ``dlbench peak`` ran, else the datasheet's) and
    every ok result with counted FLOPs. None where the device has no roof at all (a CPU without
    a peak run) or no result has a point."""
    peak_recs = [r for r in records if r.kind == "peak"]
    by_dev: dict[str, list] = {}
    for r in records:
        if r.kind == "throughput" and r.ok and r.achieved_tflops() is not None:
            by_dev.setdefault(device_key(r.env), []).append(r)
    out = []
    for dev, recs in by_dev.items():
        roofs = roofs_for(dev, recs[0].env, peak_recs)
        if not roofs.compute_tflops:
            continue
        recs, left_out = newest(recs)
        points, used = [], []
        for r in recs:
            try:
                p = point_for(r, roofs)
            except UnknownModelError:  # a model this dlbench no longer registers: its bytes are unknown
                continue
            if p is not None:
                points.append(p)
                used.append(r)
        if not points:
            continue
        plt = pyplot()
        title = f"Roofline: {dev} (roofs: {roofs.source}){left_out}"
        fig = roofline_figure(points, roofs, title)
        used += [p for p in peak_recs if device_key(p.env) == dev]
        out.append(finish(plt, fig, title, commands_of(used, commands)))
    return out
