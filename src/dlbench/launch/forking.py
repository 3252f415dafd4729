"""Processes of the test suite forked, not started afresh: the side that starts them.

Every torchrun job starts an agent and a process per rank, and each new interpreter imports
torch (about 1.5 CPU-seconds) and, for a transformers model, transformers' modelling code (4-5
more): on the suite's CPU-only machines that is most of what a tiny job costs, many times over.
The test session runs a fork server (:mod:`dlbench.launch.forkserver`, started by
``tests/conftest.py``) that imports these once and forks each such process from itself. Only
where :data:`ENV` names its socket: without it :func:`python_args` gives the arguments
unchanged, :func:`active` is false and nothing here runs. The production path, and the tests
about real processes (signals, stray ranks, what a new interpreter imports), start every process
as a new interpreter.

One process stands in for each forked one: ``python -m dlbench.launch.forking -m MODULE ARGS``
(or ``... SCRIPT ARGS``, ``... -c CODE ARGS``; :func:`client`) is what the launcher or
torchrun's agent starts, waits for and signals, in place of ``python -m MODULE ARGS``. It hands
the server its standard streams, working directory, environment and arguments; the server
forks a child that takes them over in a session of its own and runs the module, script or code
as ``__main__``. The stand-in passes on the signals it gets (SIGTERM, SIGINT, SIGHUP, SIGQUIT,
SIGUSR1, SIGUSR2) to the child's process group and ends as the child ended (its exit code, or
killed by the same signal); killed itself (SIGKILL), its child is killed by the server. A child
watches its dlbench or agent as a new process would
(:func:`dlbench.launch.signals.exit_with_parent`, through the environment it was handed).

Protocol, over a Unix socket: the stand-in sends one JSON line (``argv``, ``cwd``, ``environ``)
with its file descriptors 0, 1 and 2; the server answers ``{"pid": P}`` once forked and
``{"returncode": R}`` when the child has ended (R negative: killed by signal -R).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys

#: The socket of the fork server that forks this process's children (torchrun's agent and
#: ranks, the zygote); unset, every process is a new interpreter.
ENV = "DLBENCH_FORK_SERVER"
#: The signals a stand-in passes on to its child.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
             signal.SIGUSR2)

#: True in a process the server forked (and in what that process forks).
_forked = False


def active() -> bool:
    """Whether this process's children are forked by a fork server (the test session's)."""
    return bool(os.environ.get(ENV))


def in_child() -> bool:
    """Whether this process is one the fork server forked (not its stand-in)."""
    return _forked


def mark_forked() -> None:
    """Called by the server in each child it forks (:func:`in_child`)."""
    global _forked
    _forked = True


def python_args(*args: str) -> list[str]:
    """The interpreter's arguments ``args`` (``-m MODULE``, ``-c CODE`` or ``SCRIPT``, then the
    program's own) as given, or, where the test session runs a fork server, after
    ``-m dlbench.launch.forking``: its stand-in, which runs them in a forked child."""
    if active():
        return ["-m", "dlbench.launch.forking", *args]
    return list(args)


def client(argv: list[str]) -> int:
    """Run ``argv`` (an interpreter's arguments: ``-m MODULE``, ``-c CODE`` or ``SCRIPT``,
    then the program's) in a child of the fork server, standing in for it: signals passed on,
    its end this process's end."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(os.environ[ENV])
    request = {"argv": argv, "cwd": os.getcwd(), "environ": dict(os.environ)}
    socket.send_fds(sock, [json.dumps(request).encode() + b"\n"], [0, 1, 2])
    answers = sock.makefile("rb")
    first = answers.readline()
    if not first:
        sys.stderr.write(f"dlbench.launch.forking: the server did not fork {argv[:2]}\n")
        return 1
    pid = json.loads(first)["pid"]

    def forward(signum: int, frame) -> None:
        signal_group(pid, signum)
    for sig in FORWARDED:
        signal.signal(sig, forward)
    last = answers.readline()  # a signal handled meanwhile resumes the read (PEP 475)
    if not last:
        sys.stderr.write(f"dlbench.launch.forking: the server was lost while {argv[:2]} "
                         f"ran\n")
        return 1
    code = json.loads(last)["returncode"]
    if code < 0:  # killed by a signal: end the same way, as the parent would have seen it
        sys.stdout.flush()
        if -code != signal.SIGKILL:
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        return 128 - code
    return code


def signal_group(pid: int, sig: int) -> None:
    """``sig`` to the child's process group, or to the child alone where it has not made its
    session yet (just forked)."""
    for send in (os.killpg, os.kill):
        try:
            send(pid, sig)
            return
        except (ProcessLookupError, PermissionError):
            continue


def main(argv: list[str]) -> int:
    """``python -m dlbench.launch.forking ARGS``: the stand-in of ``python ARGS``."""
    if not argv or (argv[0] in ("-m", "-c") and len(argv) < 2):
        sys.stderr.write("usage: python -m dlbench.launch.forking "
                         "(-m MODULE | -c CODE | SCRIPT) [ARGS...]\n")
        return 2
    return client(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
