"""Workers are handed to launchers as functions and sent to other processes by name.

:func:`dlbench.launch.lookup.worker_name` makes the name, :func:`find_worker` resolves it in the
process that runs the worker; only a function that round-trips is a worker. No worker is named
by a string written in the source: the references are imports the linter sees.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from dlbench.launch.lookup import find_worker, worker_name

SRC = Path(__file__).resolve().parents[1] / "src" / "dlbench"


def top_level(job, local_rank, control):  # a worker's shape; never run
    return {}


class Holder:
    @staticmethod
    def static(job, local_rank, control):
        return {}

    @classmethod
    def klass(cls, job, local_rank, control):
        return {}

    def method(self, job, local_rank, control):
        return {}


def test_a_module_level_function_round_trips():
    name = worker_name(top_level)
    assert name == f"{__name__}:top_level"
    assert find_worker(name) is top_level


def test_the_workers_the_launchers_run_round_trip():
    from dlbench.training.runner import RANK_WORKER
    from dlbench.workloads import workers

    for fn in (workers.THROUGHPUT, workers.GENERATE, workers.SCALING_RANK, workers.COMM_RANK,
               RANK_WORKER):
        assert find_worker(worker_name(fn)) is fn
    assert worker_name(workers.COMM_RANK) == "dlbench.workloads.collectives:run_rank"


def test_a_static_or_class_method_round_trips_by_its_qualified_name():
    assert worker_name(Holder.static) == f"{__name__}:Holder.static"
    assert find_worker(worker_name(Holder.klass)) == Holder.klass


def test_a_lambda_is_refused_with_why():
    with pytest.raises(ValueError, match="lambda or a nested function"):
        worker_name(lambda job, rank, control: {})


def test_a_nested_function_is_refused_with_why():
    def nested(job, local_rank, control):
        return {}
    with pytest.raises(ValueError, match="lambda or a nested function"):
        worker_name(nested)


def test_a_bound_method_is_refused_with_why():
    with pytest.raises(ValueError, match="bound method"):
        worker_name(Holder().method)


def test_a_callable_object_or_a_partial_is_refused():
    import functools
    with pytest.raises(ValueError, match="no importable name"):
        worker_name(functools.partial(top_level, {}))
    with pytest.raises(ValueError, match="no importable name"):
        worker_name(object())


def other(job, local_rank, control):
    return {}


def test_a_function_its_module_no_longer_holds_under_its_name_is_refused(monkeypatch):
    original = top_level
    monkeypatch.setattr(sys.modules[__name__], "top_level", other)
    with pytest.raises(ValueError, match="not what"):
        worker_name(original)


def test_find_worker_refuses_a_name_without_its_function():
    with pytest.raises(ValueError, match="package.module:function"):
        find_worker("dlbench.workloads.collectives")


def test_launchers_refuse_a_worker_another_process_cannot_import_before_starting_it():
    from dlbench.launch.subprocess_launcher import SubprocessLauncher
    from dlbench.launch.torchrun import TorchrunLauncher

    with pytest.raises(ValueError, match="lambda"):
        SubprocessLauncher({"throughput": lambda cfg, env: None})
    with pytest.raises(ValueError, match="lambda"):
        TorchrunLauncher(comm_worker=lambda job, rank, control: {})
    with pytest.raises(ValueError, match="without a scaling worker"):
        TorchrunLauncher()._worker("scaling")


def test_no_worker_is_named_by_a_string_in_the_source():
    pattern = re.compile(r"""["']dlbench\.[\w.]+:[\w.]+["']""")
    found = [f"{p.relative_to(SRC.parent)}:{n}: {line.strip()}"
             for p in sorted(SRC.rglob("*.py"))
             for n, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == [], "name workers by importing them (dlbench.workloads.workers):\n" + \
        "\n".join(found)
