"""How long a tuned setup takes to earn back its compile and capture time.

The figure is a reading of two stored records, so it lives in :mod:`dlbench.records.payback`,
where the report reads it too; tuned mode keeps its name here.
"""

from __future__ import annotations

from dlbench.records.payback import payback, setup_s  # noqa: F401 (re-exported)
