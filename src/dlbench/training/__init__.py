"""Training to a target accuracy on real data (``dlbench train``), MLPerf-style.

config -> data (``dlbench.data``) -> input pipeline (``pipeline``) -> the loop (``loop``), timed
and logged with MLPerf's mllog (``mlperf``) -> raw results -> :class:`~dlbench.records.train.TrainRecord`
-> store -> tables and charts. ``scoring`` holds MLPerf's olympic mean and failure rules;
``rank`` is the per-process side of a multi-GPU job started through torchrun, ``runner`` the
parent side.
"""
