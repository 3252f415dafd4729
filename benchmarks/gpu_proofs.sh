#!/usr/bin/env bash
# The runs that prove dlbench's GPU paths, in stages that each fit a 10-minute slot.
#   benchmarks/gpu_proofs.sh STAGE OUTDIR [DB]
# STAGE: spine   GPU tests, the default suite, the fidelity check
#        suites  GPU tests, the default suite, seed 002's table, then seed 000 (eager column
#                first) until the slot ends
#        final   the default suite, then seed 000 resumed until the slot ends
#        seed000 seed 000 resumed where the last stage stopped (rerun until complete)
# SLOT_SECONDS (default 570) bounds the whole stage; a sweep cut by it stops cleanly (SIGINT).
# Everything dlbench writes goes to OUTDIR; DB (default OUTDIR/dlbench.db) may be an earlier
# stage's store, so --resume skips what it holds.
set -uo pipefail
stage=$1; out=$2; db=${3:-$out/dlbench.db}
mkdir -p "$out"
[ "$db" = "$out/dlbench.db" ] || cp "$db" "$out/dlbench.db"
db=$out/dlbench.db
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}src
# Multicast off in every process (the GPU hosts' rule).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
log=$out/$stage.log
end=$((SECONDS + ${SLOT_SECONDS:-570}))
left() { echo $((end - SECONDS > 10 ? end - SECONDS : 10)); }
py=python3
export_run() {  # name: export the latest run as JSON and CSV
  $py -m dlbench results export --db "$db" --run latest --format json -o "$out/$1.json"
  $py -m dlbench results export --db "$db" --run latest --format csv -o "$out/$1.csv"
}
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv
  case $stage in
    spine)
      $py -m pytest -q tests/test_gpu.py tests/test_throughput.py -p no:cacheprovider 2>&1 | tail -5
      $py -m dlbench run --db "$db" --tag default-suite; export_run default
      $py benchmarks/fidelity.py --out "$out/fidelity.json"
      ;;
    suites)
      $py -m pytest -q tests/test_gpu.py -p no:cacheprovider 2>&1 | tail -5
      $py -m dlbench run --db "$db" --tag default-suite; export_run default
      $py -m dlbench run --suite seed002 --db "$db" --tag seed002; export_run seed002
      # Seed 000, eager column first, until the slot ends; the next stage resumes it.
      timeout -s INT "$(left)" $py -m dlbench run --suite seed000 --db "$db" --resume --tag seed000
      ;;
    final)
      $py -m dlbench run --db "$db" --tag default-suite; export_run default
      timeout -s INT "$(left)" $py -m dlbench run --suite seed000 --db "$db" --resume --tag seed000
      $py -m dlbench results export --db "$db" --run all --format json -o "$out/all.json"
      $py -m dlbench results export --db "$db" --run all --format csv -o "$out/all.csv"
      ;;
    seed000)
      timeout -s INT "$(left)" $py -m dlbench run --suite seed000 --db "$db" --resume --tag seed000
      $py -m dlbench results export --db "$db" --run all --format json -o "$out/all.json"
      $py -m dlbench results export --db "$db" --run all --format csv -o "$out/all.csv"
      ;;
  esac
} 2>&1 | tee "$log"
