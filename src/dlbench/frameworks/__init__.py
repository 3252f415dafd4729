"""What differs per framework: PyTorch's path lives in :mod:`dlbench.workloads`; JAX's here.

The framework is one field of a config (``framework``: ``torch`` or ``jax``); the measured
window, the stopping rule, the records, the store and the report are shared.
"""

from dlbench.config import FRAMEWORKS  # noqa: F401  (the names, kept with the configs)
