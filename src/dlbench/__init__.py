"""dlbench: deep-learning benchmarks for GPUs, GPU servers and clusters.

The Python API (``docs/api.md``)::

    import dlbench
    rec = dlbench.measure_throughput("timm:resnet18", batch_size=8, device="cpu")
    print(rec.summary().throughput)

The names below load on first use (PEP 562): ``import dlbench`` and ``dlbench --help`` import
no torch; ``dlbench.measure_throughput`` loads it.
"""

# Nothing is imported here at load (not even __future__): ``python -m dlbench`` loads this
# package before the command's entry (dlbench.__main__) can catch a Ctrl-C, so it must take no
# time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "measure_throughput": "dlbench.api",
    "measure_step": "dlbench.api",
    "measure_generation": "dlbench.api",
    "measure_serving": "dlbench.api",
    "load": "dlbench.api",
    "to_dataframe": "dlbench.api",
    "StepResult": "dlbench.api",
    "InputSpec": "dlbench.models.input_spec",
    "StopRule": "dlbench.measure.stopping",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> "Any":
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
