"""Workers handed to a launcher as functions, and sent to another process by name.

A launcher starts work it does not import: its caller hands it the worker function (an import
the linter sees: the references live in :mod:`dlbench.workloads.workers` and beside the training
rank, never here), and where the worker runs in another process (a subprocess, a torchrun rank)
the launcher sends it there as a ``"package.module:qualname"`` string that only exists at run
time: :func:`worker_name` makes it from the function, and :func:`find_worker` imports it again
in the process that runs it. So ``launch/`` depends on no workload or training code, and a new
kind of job needs no change here.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable


def find_worker(name: str) -> Callable[..., Any]:
    """The function ``name`` designates (``package.module:function``, as :func:`worker_name`
    writes it), imported in this process."""
    module, sep, attr = name.partition(":")
    if not (sep and module and attr):
        raise ValueError(f"a worker is named 'package.module:function', not {name!r}")
    target: Any = importlib.import_module(module)
    for part in attr.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise TypeError(f"worker {name!r} is not callable")
    return target


def worker_name(fn: Callable[..., Any]) -> str:
    """The name another process finds ``fn`` by (:func:`find_worker`): ``"module:qualname"``.

    Only a function another process can import is a worker: one defined at the top level of
    a module (or a class's static method or class method), not ``__main__``'s. A lambda, a
    nested function, a bound method or a callable object is refused with a ValueError that says
    why, here, before any process starts.
    """
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not callable(fn) or not isinstance(module, str) or not isinstance(qualname, str):
        raise ValueError(f"a worker is a module-level function; {fn!r} has no importable name")
    name = f"{module}:{qualname}"
    if "<" in qualname:  # <lambda>, <locals>: nothing another process can import
        raise ValueError(f"worker {name!r} is a lambda or a nested function, which another "
                         f"process cannot import; define it at the top level of a module")
    if module == "__main__":
        raise ValueError(f"worker {name!r} is defined in __main__, which another process "
                         f"cannot import; define it in a module")
    try:
        found = find_worker(name)
    except (ImportError, AttributeError, TypeError, ValueError) as exc:
        raise ValueError(f"worker {name!r} cannot be found by its name ({exc})") from None
    if found != fn:  # a bound method names its class's function; a rebound name another one
        raise ValueError(f"worker {fn!r} is not what {name!r} names in its module (a bound "
                         f"method, or a function its module no longer holds under that name)")
    return name
