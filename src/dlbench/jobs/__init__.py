"""What a command runs, below the command that parses it and above what is measured.

Each module turns validated arguments into a job: configs expanded from the flags and checked
against the device (``plans``), the sweep that measures them into the store (``sweep``, run by
``runs``), the largest-batch search and ``-b auto`` (``maxbatch_search``), runs over emulated
networks (``net_runs``) and to a target accuracy (``train_runs``), each opened, stored as it
goes and closed as one run (``stored_run``). Nothing here parses arguments or prints: progress
goes to the objects the command passes in.
"""
