"""torchrun's agent, ended with dlbench: ``python -m dlbench.launch.agent TORCHRUN-ARGS``.

The agent runs in a session of its own (so that dlbench can stop it and its group), which also
means that nothing reaches it when dlbench is killed with SIGKILL: it would go on starting and
waiting for ranks. This wrapper watches dlbench (:func:`~dlbench.launch.signals.exit_with_parent`)
and names itself as the parent its ranks watch, then runs ``torch.distributed.run`` unchanged
but for one helper of its rendezvous (:func:`quick_method_names`).
"""

from __future__ import annotations

import os
import sys

from dlbench.launch.signals import PARENT_ENV, exit_with_parent


def caller_name(depth: int = 2) -> str:
    """What ``torch.distributed.elastic.rendezvous.dynamic_rendezvous.get_method_name(depth)``
    returns (the name of the function ``depth`` frames up from it), read from the frames
    themselves."""
    frame = sys._getframe(1)  # the caller of this function: the frame inspect.stack()[1] is
    for _ in range(depth - 1):
        frame = frame.f_back
        if frame is None:
            return "no_method_name"
    return frame.f_code.co_name


def quick_method_names() -> None:
    """The rendezvous names the method of each event it records (about ten a job) with
    ``inspect.stack()``, which reads the source of every frame of the stack and, for each frame
    whose file is not a module's, walks all of ``sys.modules`` (cpython issue 92041): most of
    the agent's CPU time where much is imported (about a second a job where transformers is),
    taken while its ranks start. :func:`caller_name` gives the same name from the frames."""
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous
    if hasattr(dynamic_rendezvous, "get_method_name"):
        dynamic_rendezvous.get_method_name = caller_name


def main() -> None:
    exit_with_parent()
    os.environ[PARENT_ENV] = str(os.getpid())  # the ranks watch this agent
    from torch.distributed.run import main as torchrun
    quick_method_names()
    torchrun(sys.argv[1:])


if __name__ == "__main__":
    main()
