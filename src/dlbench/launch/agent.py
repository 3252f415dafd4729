"""torchrun's agent, ended with dlbench: ``python -m dlbench.launch.agent TORCHRUN-ARGS``.

The agent runs in a session of its own (so that dlbench can stop it and its group), which also
means that nothing reaches it when dlbench is killed with SIGKILL: it would go on starting and
waiting for ranks. This wrapper watches dlbench (:func:`~dlbench.launch.signals.exit_with_parent`)
and names itself as the parent its ranks watch, then runs ``torch.distributed.run`` unchanged.
"""

from __future__ import annotations

import os
import sys

from dlbench.launch.signals import PARENT_ENV, exit_with_parent


def main() -> None:
    exit_with_parent()
    os.environ[PARENT_ENV] = str(os.getpid())  # the ranks watch this agent
    from torch.distributed.run import main as torchrun
    torchrun(sys.argv[1:])


if __name__ == "__main__":
    main()
