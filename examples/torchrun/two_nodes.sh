#!/usr/bin/env bash
# Data-parallel scaling over two hosts without a scheduler: run this on both, the same way,
# with this host's rank (dlbench starts one torchrun agent per host, which meet at MASTER).
#
#   host A:  NODE_RANK=0 MASTER=hostA:29500 examples/torchrun/two_nodes.sh
#   host B:  NODE_RANK=1 MASTER=hostA:29500 examples/torchrun/two_nodes.sh
#   then, with both stores on one machine:
#            dlbench results merge --db job.db node-0.db node-1.db
#
# Settings (environment): MODEL (resnet50), GPUS_PER_NODE (8), BATCH (the model's default),
# JOB (the rendezvous id both hosts share; dlbench-2n), DB_PREFIX (node: node-R.db),
# DLBENCH (the command; dlbench), and EXTRA: more flags for `dlbench scale`, e.g.
# "--precision bf16" (or, to try it on one machine without GPUs, "--device cpu").
# Writes DB_PREFIX-NODE_RANK.db: this host's copy of the job's records (every rank's step times).
set -euo pipefail
: "${NODE_RANK:?set NODE_RANK: 0 on the first host, 1 on the second}"
: "${MASTER:?set MASTER=HOST:PORT: the first host, a port free on it}"

batch=()
if [[ -n "${BATCH:-}" ]]; then batch=(-b "$BATCH"); fi
# shellcheck disable=SC2086  # DLBENCH and EXTRA are word lists on purpose
exec ${DLBENCH:-dlbench} scale -m "${MODEL:-resnet50}" "${batch[@]}" \
  --gpus "${GPUS_PER_NODE:-8}" --nnodes 2 --node-rank "$NODE_RANK" \
  --rdzv-endpoint "$MASTER" --rdzv-id "${JOB:-dlbench-2n}" \
  --db "${DB_PREFIX:-node}-$NODE_RANK.db" ${EXTRA:-}
