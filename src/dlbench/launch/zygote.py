"""A process that imports torch and the model libraries once, then forks each fresh worker.

Why: on the H100 hosts dlbench is proven on, a new interpreter spent 4-7 s importing torch,
about 6 s importing torchvision and as long again importing transformers before it touched the
GPU (creating the CUDA context took 0.3-0.4 s). Every ``--isolate`` or ``--repeat`` process paid
that again: most of a default-suite process's 20 s. A child forked from a process that has
imported these libraries, but never initialised CUDA, is as fresh as a new interpreter where a
GPU figure can differ between processes: its CUDA context, cuDNN's autotuning, the caching
allocator and its kernels' first launches all begin in the child. The zygote must therefore
never initialise CUDA: its environment sets ``PYTORCH_NVML_BASED_CUDA_CHECK=1`` so that even a
library's ``torch.cuda.is_available()`` at import asks NVML instead of the CUDA driver, and it
imports nothing that runs a model. JAX is never forked (its runtime starts threads at import):
the launcher starts those workers as new interpreters.

Protocol, one JSON object per line. The parent sends a worker job (the payload of
:mod:`dlbench.launch.worker`, plus ``environ``: the parent's environment when it sent the job).
The zygote imports what the job's model and worker need, forks, and answers ``{"pid": P}`` at
once and ``{"pid": P, "returncode": R}`` when the child has ended (R negative: killed by signal
-R). The child runs in a session of its own (the parent ends it with its process group), writes
its stdout and stderr to ``OUT.stderr`` beside the record, and ends with its parent or with
dlbench (:func:`dlbench.launch.signals.exit_with_parent`). The zygote ends at the end of its
input, which is also what it sees when dlbench dies.

In the test suite, where a fork server has imported torch and transformers already
(:mod:`dlbench.launch.forking`), the zygote is itself forked from it, and the process dlbench
started stands in for it.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import sys
import traceback
import warnings

from dlbench.launch import forking

#: The registry's model sources that are libraries, imported in the zygote before its first
#: fork (a registry source names its library).
LIBRARIES = ("torchvision", "timm", "transformers")
#: The same for ``PREFIX:NAME`` models (``dlbench.models.sources``); a user's ``FILE.py:FUNC``
#: is never imported here: the zygote runs no code of a model, which could initialise CUDA.
PREFIXES = {"timm": "timm", "torchvision": "torchvision", "hf": "transformers"}
#: What every worker imports (torch, the launcher's child side, the models, and TorchDynamo,
#: which torch's optimizers import when the first one is built: a second of CPU a worker on the
#: CPU, more on the GPU hosts, and no thread, no CUDA); the job's own worker module
#: (``job["worker"]``) is imported before its first fork (:func:`preload_worker`).
COMMON = ("dlbench.launch.worker", "dlbench.models", "torch._dynamo")


def library_for(model: str) -> str | None:
    """The library that builds ``model``, if one of those the zygote preloads."""
    from dlbench.models import sources
    if sources.is_external(model):
        return PREFIXES.get(model.split(":", 1)[0])
    try:
        from dlbench.models import get_model
        source = get_model(model).source  # the registry: a lookup, no build
        return source if source in LIBRARIES else None
    except Exception:  # noqa: BLE001 - an unknown name: the child reports it, as a record
        return None


def preload(config: dict) -> None:
    """Import, in the zygote, the library that builds ``config``'s model (once; later forks
    find it imported)."""
    library = library_for(config["model"])
    if library is not None:
        try:
            importlib.import_module(library)
        except ImportError:  # the child reports the missing library with its hint
            pass


def preload_worker(name: str) -> None:
    """Import, in the zygote, the module of the worker ``name`` (``module:function``) once:
    later forks find it imported. The child imports it again by name and reports what fails."""
    try:
        importlib.import_module(name.partition(":")[0])
    except Exception:  # noqa: BLE001 - the child reports it, as a record
        pass


def _child(job: dict) -> None:
    """In the forked child: a session of its own, output to a file, the job, then exit."""
    code = 1
    try:
        os.setsid()
        fd = os.open(job["out"] + ".stderr", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd, 1)  # fd 1 is the zygote's answer pipe: nothing of the child's may reach it
        os.dup2(fd, 2)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        sys.stdin = open(os.devnull)
        os.environ.clear()
        os.environ.update(job.pop("environ", None) or {})
        from dlbench.launch.signals import exit_with_parent
        from dlbench.launch.worker import run_job
        exit_with_parent()
        run_job(job)
        code = 0
    except BaseException:  # noqa: BLE001 - reported as the worker's stderr, as a new one would
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _answer(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main() -> int:
    if forking.active() and not forking.in_child():
        # the test session's fork server imported torch and transformers once: this zygote is
        # a child of it (stdin, stdout and stderr handed over), and this process stands in
        return forking.client(["-m", "dlbench.launch.zygote"])
    for name in COMMON:
        importlib.import_module(name)
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        preload(job["config"])
        preload_worker(job.get("worker", ""))
        # What the zygote imported is left out of its children's garbage collections: they
        # would walk millions of objects (torch's, transformers'), and writing to every one of
        # them copies the zygote's pages into each worker (CPython's advice for a forking server).
        gc.freeze()
        with warnings.catch_warnings():  # a library's idle thread: the child never uses it
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:
            _child(job)  # never returns
        _answer({"pid": pid})
        _, status = os.waitpid(pid, 0)
        _answer({"pid": pid, "returncode": os.waitstatus_to_exitcode(status)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
