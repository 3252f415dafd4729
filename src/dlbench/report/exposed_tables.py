"""Exposed communication of ``dlbench scale`` records: the time a step's collectives ran with no
compute beside them, from the steps each rank profiled after its window
(:mod:`dlbench.measure.comm_profile`, :mod:`dlbench.measure.overlap`).

:func:`exposed_cell` is the strategy table's column; :func:`exposed_comm_table` has a row per
record, with all its communication beside the exposed part, the worst rank, what the profile
cost, and why a rank measured nothing. A store of records made before the measurement existed
gets neither (its tables read as before).
"""

from __future__ import annotations

from typing import Any, Sequence

from dlbench.measure.overlap import summarise, unmeasured_reason
from dlbench.report.table import Table

#: What the figures are, for a table's notes.
NOTE = ("exposed comm = per step, the time a rank's collectives ran with no compute beside "
        "them (NCCL kernels against the compute kernels on a GPU; gloo's collectives against "
        "PyTorch's operators on the CPU), in steps each rank profiled after its window: the "
        "mean over the ranks' steps, and in parentheses its share of those steps' time (on the "
        "CPU the profiler slows every operator, so the share is the profiled steps')")


def profiles(r: Any) -> tuple[dict[str, Any], ...]:
    """A scaling record's per-rank profiles (none in records made before they existed)."""
    return tuple(getattr(r, "rank_comm_profile", ()) or ())


def has_figure(records: Sequence[Any]) -> bool:
    """Whether any ok record among ``records`` measured its exposed communication."""
    return any(r.ok and summarise(profiles(r)) is not None for r in records
               if getattr(r, "kind", "") == "scaling")


def exposed_cell(group: Sequence[Any]) -> str:
    """``ms per step (share of the step)`` of a record, or of a ``--repeat`` group its ok jobs'
    ranks together; ``-`` where nothing was measured."""
    s = summarise([p for r in group if r.ok for p in profiles(r)])
    if s is None:
        return "-"
    return f"{s.per_step_s * 1e3:.3g} ({s.share:.1%})"


def exposed_comm_table(records: Sequence[Any]) -> Table:
    """A row per ok scaling record that was profiled (or says why not)."""
    rows = []
    for r in records:
        if getattr(r, "kind", "") != "scaling" or not r.ok or not profiles(r):
            continue
        ps = profiles(r)
        s = summarise(ps)
        why = unmeasured_reason(ps)
        cost = max((p.get("cost_s") or 0.0 for p in ps), default=0.0)
        if s is None:
            rows.append((r.config.label, r.backend or "-", "-", "-", "-", "-", "-",
                         f"{cost:.2f}", why or "-"))
            continue
        rows.append((
            r.config.label, r.backend or "-",
            f"{s.steps} x {s.ranks} of {s.of_ranks} ranks, {s.source}",
            f"{s.comm_per_step_s * 1e3:.3g}",
            f"{s.per_step_s * 1e3:.3g}", f"{s.share:.1%}", f"{s.worst_share:.1%}",
            f"{cost:.2f}", why or "-"))
    return Table("Exposed communication, profiled after the window",
                 ("config", "backend", "profiled steps", "comm ms/step", "exposed ms/step",
                  "exposed % of step", "worst rank %", "profile cost s", "unmeasured"),
                 tuple(rows),
                 (NOTE + "; comm ms/step = all the collectives' time, hidden or not; worst "
                  "rank = the rank with the largest exposed share; profile cost = the slowest "
                  "rank's seconds for the profiled steps and the profiler, added to the job",))
