"""What-if: predicted data-parallel scaling from a measured one-GPU step and the alpha-beta cost.

- :mod:`~dlbench.whatif.networks`: a link by name or by its bandwidth and latency (the named
  links, Ethernet, InfiniBand, NVLink, PCIe, each figure with its source, are
  :mod:`dlbench.reference.networks`);
- :mod:`~dlbench.whatif.patterns`: communication patterns (ring, tree, dlbench's ps, TensorFlow's
  push-pull, hierarchical) and their alpha-beta cost, per host; pure;
- :mod:`~dlbench.whatif.sharded`: FSDP's all-gathers and reduce-scatters, tensor parallelism's
  per-layer all-reduces, and the step they leave (FSDP's per-block overlap); pure;
- :mod:`~dlbench.whatif.model`: step time, throughput, efficiency, where communication stops
  hiding behind compute;
- :mod:`~dlbench.whatif.inputs`: compute time, gradient bytes and measured links from records;
- :mod:`~dlbench.whatif.check`: the model against ``dlbench net``, ``dlbench scale`` and the 2017
  parameter-server cluster;
- :mod:`~dlbench.whatif.scenarios`: what ``dlbench whatif`` asks of them: workloads, clusters,
  predictions, checks.
"""
