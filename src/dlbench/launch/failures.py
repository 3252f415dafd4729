"""Turning an exception into a result row: failures are data, and the sweep goes on.

An exception that knows which row it becomes says so with an ``error_type`` class attribute (an
:class:`~dlbench.records.base.ErrorType` value): ``UnsupportedError`` (``unsupported``) and
``NanLossError`` (``nan``) do, so this module needs to import neither the workloads that raise
them nor anything above ``records/``. Such an error is expected, and its row keeps the message
alone; any other keeps the tail of its traceback for a bug report.
"""

from __future__ import annotations

import gc
import traceback
from typing import Any

import torch

from dlbench.records import Record, record_type_for
from dlbench.records.base import ErrorType

# Errors after which the CUDA context (or a communicator) is broken: nothing more can run in this
# process. timm's benchmark stops retrying on the same ones.
FATAL_MARKERS = (
    "illegal memory access",
    "device-side assert",
    "unspecified launch failure",
    "CUDA error: misaligned address",
    "an illegal instruction",
    "NCCL communicator was aborted",
    "ECC error",
)

#: Appended to a fatal error's message: what a user does next.
FATAL_HINT = ("This process can no longer use the device, so an inline sweep stops here; rerun "
              "with --resume --isolate to run each benchmark in a fresh process, which ends with "
              "the error while the sweep goes on in the next one.")


#: The values an exception may declare (a library's own ``error_type`` attribute is not one).
ERROR_TYPES = frozenset(v for k, v in vars(ErrorType).items() if k.isupper())


def declared_type(exc: BaseException) -> str | None:
    """The :class:`ErrorType` an exception declares (its class's ``error_type``), or None."""
    kind = getattr(type(exc), "error_type", None)
    return kind if kind in ERROR_TYPES else None


def classify(exc: BaseException) -> str:
    """The :class:`ErrorType` of an exception raised while measuring."""
    if isinstance(exc, torch.OutOfMemoryError):
        return ErrorType.OOM
    declared = declared_type(exc)
    if declared is not None:
        return declared
    text = str(exc)
    if "out of memory" in text.lower():  # some backends raise a plain RuntimeError on OOM
        return ErrorType.OOM
    if any(m in text for m in FATAL_MARKERS):
        return ErrorType.FATAL
    return ErrorType.EXCEPTION


def describe(exc: BaseException) -> str:
    """The message a user needs first, then the last frames of the traceback for a bug report."""
    head = f"{type(exc).__name__}: {exc}".strip()
    if isinstance(exc, torch.OutOfMemoryError) or declared_type(exc) is not None:
        return head[:2000]
    tail = "".join(traceback.format_exception(exc)[-4:])
    return (head[:1500] + "\n" + tail[-2500:]).strip()


class ModelExitedError(RuntimeError):
    """Model code (a factory, a forward) raised SystemExit (``sys.exit``, ``exit()``) or another
    BaseException that is no Exception and no Ctrl-C: the model's failure, never dlbench's end."""


def is_model_exit(exc: BaseException) -> bool:
    """Whether ``exc``, raised while a model was built or measured, is the model ending the
    process (``sys.exit``, a BaseException of its own) rather than an error or a Ctrl-C."""
    return not isinstance(exc, (Exception, KeyboardInterrupt, GeneratorExit))


def model_exited(exc: BaseException) -> ModelExitedError:
    """The error a model's SystemExit (or other BaseException) becomes, with the frames that
    raised it."""
    what = (f"called sys.exit({exc.code!r})" if isinstance(exc, SystemExit) else
            f"raised {type(exc).__name__}({str(exc)[:200]!r}) (a BaseException, not an "
            "Exception)")
    err = ModelExitedError(f"the model's code {what} while it was built or measured; nothing "
                           "was measured")
    return err.with_traceback(exc.__traceback__)


def failure_record(cfg: Any, env: dict, exc: BaseException) -> Record:
    """The failure row of ``cfg`` (a record of the kind whose config it is)."""
    return record_type_for(cfg)(config=cfg, env=env, status="error", error_type=classify(exc),
                                error=describe(exc))


def release_memory() -> None:
    """Give back what a failed measurement held, so the next one starts from a clean device."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
