"""Training to a target accuracy on real data (``dlbench train``), MLPerf-style.

config -> data (``dlbench.data``) -> input pipeline (``pipeline``) -> the loop (``loop``), timed
and logged with MLPerf's mllog (``mlperf``) -> raw results -> :class:`~dlbench.records.train.TrainRecord`
-> store -> tables and charts. ``scoring`` holds the per-setup convergence figures (MLPerf's
olympic mean and failure rules are :mod:`dlbench.measure.olympic`, below the tables that show
them); ``rank`` is the per-process side of a multi-GPU job started through torchrun, ``runner``
the parent side.
"""
