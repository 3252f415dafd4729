"""The workers the launchers run, as functions: imports the linter sees.

A launcher (:mod:`dlbench.launch`) imports no workload: whoever builds one hands it these
(:mod:`dlbench.jobs.launchers` for the commands, :mod:`dlbench.workloads.maxbatch` for its
probes), and a launcher that runs one in another process sends it there by name
(:func:`dlbench.launch.lookup.worker_name`). The training rank, above this layer, is named
beside its runner (:mod:`dlbench.training.runner`).

Importing this module imports every workload below (torch, the models' registry): a caller that
must stay light imports it where it builds a launcher, not at the top of its module.
"""

from __future__ import annotations

from dlbench.workloads import collectives, generate, scaling_rank, throughput

#: Measures one throughput config in this process: ``measure(cfg, env[, flops=...])``.
THROUGHPUT = throughput.measure
#: Measures one generation config in this process: ``measure(cfg, env[, flops=...])``.
GENERATE = generate.measure
#: One rank of a scaling job (DDP, FSDP, TP): ``run_rank(job, local_rank, control)``.
SCALING_RANK = scaling_rank.run_rank
#: One rank of a collective-bandwidth job: ``run_rank(job, local_rank, control)``.
COMM_RANK = collectives.run_rank

#: The in-process worker of each record kind a sweep runs (what inline and isolated
#: launchers take).
BY_KIND = {"throughput": THROUGHPUT, "generate": GENERATE}
