"""Workers named by a ``"package.module:function"`` string.

A launcher starts work it does not import: the caller names the function, and the process that
runs it (this one, a subprocess, a torchrun rank) imports it there. So ``launch/`` depends on no
workload or training code, and a new kind of job needs no change here.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable


def find_worker(name: str) -> Callable[..., Any]:
    """The function ``name`` designates: ``"dlbench.workloads.comm:run_rank"``."""
    module, sep, attr = name.partition(":")
    if not (sep and module and attr):
        raise ValueError(f"a worker is named 'package.module:function', not {name!r}")
    target: Any = importlib.import_module(module)
    for part in attr.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise TypeError(f"worker {name!r} is not callable")
    return target
