#!/usr/bin/env bash
# dlbench's collectives beside nccl-tests on this host, like for like, in one sitting:
#   benchmarks/beside_nccl_tests.sh OUTDIR NCCL_TESTS_BUILD [PART ...]
#
# NCCL_TESTS_BUILD is the folder of nccl-tests' binaries (all_reduce_perf, ...), built with MPI
# against the NCCL that torch loads, e.g.
#   make -j MPI=1 MPI_HOME=/path/to/mpi BUILDDIR=/tmp/nccl-tests
# and started one process per GPU, as dlbench starts its ranks: `mpiexec -n RANKS BIN -g 1`
# (MPIEXEC overrides `mpiexec`). Parts, the two sides alternating so that neither always runs
# on a cooler or warmer host:
#   allreduce  all_reduce of float32, 8 B to 1 GiB, graph timing x20 beside -G 20: dlbench through
#              NCCL's own API on ncclMemAlloc's buffers (--api nccl --buffers nccl: as nccl-tests
#              calls NCCL), and through torch.distributed (the default: what a PyTorch program
#              gets), each twice, beside three nccl-tests runs; one eager run before them
#   eager      eager timing (one call and event at a time) beside -I 1, both APIs
#   bf16       all_reduce of bfloat16 through NCCL's API beside -d bfloat16 -G 20
#   ops        all_gather, reduce_scatter, broadcast, all_to_all through NCCL's API beside their
#              *_perf -G 20
# With no PART, all four in this order.
#
# How long, on two H100s: about 6.5 minutes with the exports (each dlbench run 25-50 s, each
# nccl-tests run 5-10 s); building nccl-tests takes 2 more. RANKS=N sets the processes (default
# 2); CUDA_VISIBLE_DEVICES the GPUs.
#
# Writes, in OUTDIR: dlbench.db, nccl-tests' output (nccl-*.txt), order.txt (what ran, in
# order), beside.md (each dlbench run beside the first like nccl-tests run after it:
# benchmarks/beside_nccl_tests.py), all.csv, all.json, tables.md and one log per part.
# NVLink multicast stays off on both sides (lib.sh): every busbw is a ring's or a tree's.
set -uo pipefail
usage="usage: $0 OUTDIR NCCL_TESTS_BUILD [allreduce|eager|bf16|ops ...]"
out=${1:?$usage}; build=${2:?$usage}; shift 2
parts=${*:-allreduce eager bf16 ops}
source "$(dirname "$0")/lib.sh"
[ -x "$build/all_reduce_perf" ] || { echo "no all_reduce_perf in $build: $usage" >&2; exit 2; }
begin allreduce eager bf16 ops
nvlink_multicast_off
ranks=${RANKS:-2}
mpiexec=${MPIEXEC:-mpiexec}

# comm TAG ARGS...: one dlbench comm run, its run id appended to order.txt (exit 3, some sizes
# stored as failures, still made a run; any other failure made none to pair)
comm() {
  local tag=$1 rc; shift
  dl comm --min-bytes 8B --max-bytes 1GiB --ranks "$ranks" --db "$db" -q --tag "$tag" "$@"
  rc=$?
  [ "$rc" -eq 0 ] || [ "$rc" -eq 3 ] || { echo "dlbench comm $tag failed (exit $rc)" >&2; return "$rc"; }
  python3 - "$db" "$out/order.txt" <<'EOF'
import sys
from dlbench.store import Store
store = Store(sys.argv[1])
with open(sys.argv[2], "a") as order:
    order.write(f"dlbench {store.runs(limit=1)[0].run_id}\n")
store.close()
EOF
}

# nt NAME BIN ARGS...: one nccl-tests run into OUTDIR/NAME.txt, appended to order.txt
nt() {
  local name=$1 bin=$2; shift 2
  "$mpiexec" -n "$ranks" "$build/$bin" -b 8 -e 1G -f 2 -g 1 "$@" > "$out/$name.txt" 2>&1 ||
    { echo "$bin failed: $out/$name.txt" >&2; return 1; }
  echo "nccl-tests $name.txt" >> "$out/order.txt"
}

graph="--timing graph --iters-per-sample 20"
nccl="--api nccl --buffers nccl"

allreduce() {
  comm graph20 --op all_reduce $graph
  comm nccl-api-nccl-buffers-graph20 --op all_reduce $graph $nccl
  comm eager --op all_reduce --timing eager
  nt nccl-mpi-G20-1 all_reduce_perf -G 20
  comm nccl-api-nccl-buffers-graph20 --op all_reduce $graph $nccl
  nt nccl-mpi-G20-2 all_reduce_perf -G 20
  comm graph20 --op all_reduce $graph
  nt nccl-mpi-G20-3 all_reduce_perf -G 20
}

eager() {
  nt nccl-mpi-I1-1 all_reduce_perf -I 1
  comm nccl-api-nccl-buffers-eager --op all_reduce --timing eager $nccl
  comm eager --op all_reduce --timing eager
  nt nccl-mpi-I1-2 all_reduce_perf -I 1
}

bf16() {
  comm nccl-api-nccl-buffers-graph20-bf16 --op all_reduce $graph $nccl --dtype bfloat16
  nt nccl-mpi-G20-bf16 all_reduce_perf -G 20 -d bfloat16
}

ops() {
  comm nccl-api-nccl-buffers-graph20 --op all_gather,reduce_scatter,broadcast,all_to_all \
      $graph $nccl
  local c
  for c in all_gather reduce_scatter broadcast alltoall; do
    nt "nccl-mpi-G20-$c" "${c}_perf" -G 20
  done
}

run_parts
python3 "$(dirname "$0")/beside_nccl_tests.py" "$out" > /dev/null && echo "side by side: $out/beside.md"
export_results
