"""The test suite's fork server: imports torch and transformers once, then forks the processes
that stand-ins ask for (:mod:`dlbench.launch.forking` says why, and what a stand-in is).

``tests/conftest.py`` starts one per test process (:func:`start`) and names its socket in
:data:`~dlbench.launch.forking.ENV`. A child takes over its stand-in's standard streams, working
directory, environment and arguments, in a session of its own, and runs the module, script or
code as ``__main__``, as ``python`` would. The server ends at the end of its standard input
(the test process that started it is gone), and what it forked ends with it.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import socket
import sys
from typing import TYPE_CHECKING

from dlbench.launch import forking, zygote
from dlbench.launch.forking import signal_group

if TYPE_CHECKING:
    import subprocess

#: What every forked process finds imported: torch, torchrun's agent, the rank's entry, and
#: transformers' modelling base (the bulk of its cost, which the top-level package defers) with
#: the architectures of the test models that most jobs train (tiny_llama, tiny_gpt2).
BASE = ("torch", "torch.distributed.run", "dlbench.launch.agent", "dlbench.launch.rank_entry",
        "dlbench.launch.worker", "dlbench.models", "transformers.modeling_utils",
        "transformers.models.llama.modeling_llama", "transformers.models.gpt2.modeling_gpt2")


def serve(listener: socket.socket) -> None:
    """Fork a child for each stand-in that connects to ``listener``, until stdin ends.

    :data:`BASE` is imported first, while the test processes start and collect their tests
    (stand-ins that connect meanwhile wait in the listening queue): imported at the first fork
    instead, the first tests of every test process waited on it together, a core idle."""
    import selectors
    _preload([])
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, ("accept", None))
    sel.register(sys.stdin.fileno(), selectors.EVENT_READ, ("parent", None))
    running: dict[int, tuple[socket.socket, int]] = {}  # pid -> (its stand-in, its pidfd)
    while True:
        for key, _ in sel.select():
            what, pid = key.data
            if what == "parent":
                if not os.read(key.fd, 4096):  # the session is over: so is what it started
                    for child in running:
                        signal_group(child, signal.SIGKILL)
                    return
            elif what == "accept":
                conn, _ = listener.accept()
                started = _start(conn, listener, running)
                if started is not None:
                    running[started[0]] = (conn, started[1])
                    sel.register(conn, selectors.EVENT_READ, ("stand-in", started[0]))
                    sel.register(started[1], selectors.EVENT_READ, ("child", started[0]))
            elif what == "stand-in":  # it never writes again: this is its end
                sel.unregister(key.fd)
                if pid in running:
                    signal_group(pid, signal.SIGKILL)
            elif what == "child":
                _reap(pid, running.pop(pid), sel)


def _start(conn: socket.socket, listener: socket.socket,
           running: dict[int, tuple[socket.socket, int]]) -> tuple[int, int] | None:
    """Read a stand-in's request, fork its child; (pid, pidfd), or None where the stand-in
    went away first."""
    conn.settimeout(60)
    try:
        data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        while not data.endswith(b"\n"):
            more = conn.recv(1 << 20)
            if not more:
                raise ConnectionError("the stand-in ended before its request")
            data += more
    except OSError:
        conn.close()
        return None
    conn.settimeout(None)
    request = json.loads(data)
    _preload(request["argv"])
    sys.stdout.flush()
    sys.stderr.flush()
    gc.freeze()  # the imports are left out of the child's garbage collections (zygote.main)
    pid = os.fork()
    if pid == 0:  # the server's own descriptors are no business of the child's
        _child(request, fds, [listener.fileno(), conn.fileno(),
                              *(fd for c, p in running.values() for fd in (c.fileno(), p))])
    for fd in fds:
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    try:
        conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    except OSError:  # the stand-in is gone: so is its child (the pidfd reaps it)
        signal_group(pid, signal.SIGKILL)
    return pid, pidfd


def _reap(pid: int, entry: tuple[socket.socket, int], sel) -> None:
    """The child ``pid`` ended: tell its stand-in how."""
    conn, pidfd = entry
    _, status = os.waitpid(pid, 0)
    try:
        conn.sendall(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}).encode()
                     + b"\n")
    except OSError:
        pass
    for fd in (conn.fileno(), pidfd):
        try:
            sel.unregister(fd)
        except (KeyError, ValueError):
            pass
    conn.close()
    os.close(pidfd)


def _preload(argv: list[str]) -> None:
    """Import, in the server, what the process ``argv`` will import: for a rank, its job's
    worker and its model's library (once; later forks find them imported)."""
    import importlib
    for name in BASE:  # imported once, at the server's start (serve)
        try:
            importlib.import_module(name)
        except ImportError:  # an extra not installed: the child reports what it misses
            pass
    if argv[:2] != ["-m", "dlbench.launch.rank_entry"] or len(argv) < 3:
        return
    try:
        with open(argv[2]) as f:
            job = json.load(f)
    except (OSError, ValueError):  # the rank reports it
        return
    worker = job.get("worker") or ""
    if worker.startswith("dlbench."):  # a user's worker is imported by the rank alone
        zygote.preload_worker(worker)
    config = job.get("config") or {}
    model = config.get("model") or (config.get("base") or {}).get("model")
    if not isinstance(model, str) or (config.get("base") or config).get("framework") == "jax":
        return
    zygote.preload({"model": model})  # timm, torchvision: once a job needs them


def _child(request: dict, fds: list[int], close: list[int]) -> None:
    """In the forked child: the stand-in's streams, directory, environment and arguments, a
    session of its own, then the module, script or code as ``__main__``; never returns."""
    forking.mark_forked()
    code = 1
    try:
        os.setsid()
        for fd, target in zip(fds, (0, 1, 2)):
            os.dup2(fd, target)
        for fd in {*fds, *close} - {0, 1, 2}:
            os.close(fd)
        sys.stdin = open(0, closefd=False)
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
        _take_over(request)
        code = _run_main(request["argv"])
    except BaseException:  # noqa: BLE001 - reported on the child's stderr, as Python would
        import traceback
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _take_over(request: dict) -> None:
    """What a new interpreter started by the stand-in would have read from its start: the
    working directory, the environment (and what is read from it once: the temporary folder,
    ``PYTHONPATH``, the working directory on ``sys.path`` unless ``PYTHONSAFEPATH``, the
    intra-op threads)."""
    import tempfile
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["environ"])
    tempfile.tempdir = None
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
             if p and p not in sys.path]
    # what Python puts first on sys.path (unless PYTHONSAFEPATH): the working directory for
    # -m, "" for -c, the script's folder
    first = {"-m": os.getcwd(), "-c": ""}.get(request["argv"][0],
                                               os.path.dirname(os.path.abspath(request["argv"][0])))
    sys.path[:0] = ([] if os.environ.get("PYTHONSAFEPATH") else [first]) + extra
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        import torch
        torch.set_num_threads(int(threads))


def _run_main(argv: list[str]) -> int:
    """``python ARGV`` (``-m MODULE``, ``-c CODE`` or ``SCRIPT``, then the program's arguments)
    in this process; its exit code."""
    import atexit
    import runpy
    code = 0
    try:
        if argv[0] == "-m":
            sys.argv = argv[1:]  # the module's path in argv[0]: runpy puts it there
            _forget(argv[1])
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        elif argv[0] == "-c":
            sys.argv = ["-c", *argv[2:]]
            main = type(sys)("__main__")
            sys.modules["__main__"] = main
            exec(compile(argv[1], "<string>", "exec"), main.__dict__)
        else:
            sys.argv = list(argv)
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except KeyboardInterrupt:
        import traceback
        traceback.print_exc()
        code = -signal.SIGINT
    except BaseException:  # noqa: BLE001 - what Python prints for an uncaught exception
        import traceback
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()
    if code < 0:  # Python ends on an uncaught KeyboardInterrupt killed by SIGINT
        sys.stdout.flush()
        sys.stderr.flush()
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


def _forget(module: str) -> None:
    """Drop ``module`` (a package's ``__main__``) from the imported modules: ``-m`` runs it
    afresh as ``__main__``, and a later import of it by name is a second copy."""
    for name in (module, module + ".__main__"):
        if not hasattr(sys.modules.get(name), "__path__"):  # never a package itself
            sys.modules.pop(name, None)


def _exit_code(value) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value & 0xFF
    print(value, file=sys.stderr)
    return 1


def start(path: str, log: int) -> tuple[subprocess.Popen, socket.socket]:
    """Start a fork server on a new socket at ``path`` (its stderr to the file descriptor
    ``log``): its process (which ends when its stdin is closed) and the listening socket."""
    import subprocess
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    env = {k: v for k, v in os.environ.items() if k != forking.ENV}
    env.update(PYTHONSAFEPATH="1", OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "1"),
               PYTORCH_NVML_BASED_CUDA_CHECK="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "dlbench.launch.forkserver", str(listener.fileno())],
        stdin=subprocess.PIPE, stdout=log, stderr=log, pass_fds=[listener.fileno()], env=env,
        start_new_session=True, cwd="/")
    return proc, listener


def main(argv: list[str]) -> int:
    """``python -m dlbench.launch.forkserver FD``: serve on the listening socket ``FD``."""
    serve(socket.socket(fileno=int(argv[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
