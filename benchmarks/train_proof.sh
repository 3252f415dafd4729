#!/usr/bin/env bash
# The GPU proof of `dlbench train`: Fashion-MNIST to a target accuracy, MLPerf-style, with seed
# 003's batch-size table and seed 004's curves.
#   benchmarks/train_proof.sh OUTDIR DATADIR [GPUS]
# DATADIR: Fashion-MNIST's four idx files (train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz,
#   t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz), e.g. a copy of
#   /usr/share/datasets/fashion-mnist (Debian: apt-get install dataset-fashion-mnist).
# GPUS: GPU counts, default 1; 1,2 on two GPUs, 1,2,4 on four (DDP through torchrun).
# mlperf-logging must be importable. On a machine without a network: here
#   python3 -m pip install --no-deps --target DIR mlperf-logging==4.1.68
# and PYTHONPATH=DIR there (its needs, numpy, pandas, scipy and pyyaml, are usually installed).
#
# Stages (SLOT_SECONDS, default 230, bounds the whole script; a stage cut by it stops cleanly with
# SIGINT and keeps every finished run):
#   1. MLPerf: cnn10 to TARGET (default 0.90), 5 seeds at batch 512 per GPU, at each GPU count:
#      time to train per seed, the olympic mean, epochs to converge, throughput beside it.
#   2. Seed 003's table: batches 128, 256, 1024 and 2048 per GPU (512 comes from stage 1), one
#      seed each, at each GPU count.
#   3. MLPerf's compliance checker, its own command line, on every MLPerf log: compliance.txt.
#   4. Exports: train.json, train.csv, tables.md, report.html (the curves), the logs in mllog/.
# TARGET, MODEL, DATASET and PRECISION override the defaults (a dry run of this script on a CPU:
#   MODEL=tiny_mlp DATASET=mnist5k TARGET=0.85 benchmarks/train_proof.sh /tmp/p MNIST5K_DIR).
set -uo pipefail
out=$1; data=$2; gpus=${3:-1}
target=${TARGET:-0.90}
mkdir -p "$out"
db=$out/dlbench.db
source "$(dirname "$0")/gpu_env.sh"
end=$((SECONDS + ${SLOT_SECONDS:-230}))
py=python3
common=(--dataset "${DATASET:-fashion-mnist}" --data-dir "$data" -m "${MODEL:-cnn10}"
        --target "$target" --gpus "$gpus" --precision "${PRECISION:-bf16}" --db "$db"
        --log-dir "$out/mllog" --timeout 600)
{
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv 2>/dev/null || true
  $py -c "import mlperf_logging, torch; print('mlperf-logging', mlperf_logging.__file__, 'torch', torch.__version__)" || {
    echo "mlperf-logging is not importable: see the header of this script"; exit 2; }
  ls -l "$data"

  echo "== 1. MLPerf: 5 seeds at batch 512/GPU to $target, GPUs $gpus"
  timeout -s INT "$(left)" $py -m dlbench train "${common[@]}" -b 512 --seeds 5 \
      --max-epochs 15 --tag train-mlperf

  echo "== 2. seed 003's batch table: 128, 256, 1024, 2048 per GPU, GPUs $gpus"
  timeout -s INT "$(left)" $py -m dlbench train "${common[@]}" -b 128,256,1024,2048 --seeds 1 \
      --max-epochs 20 --tag train-batches

  echo "== 3. MLPerf's compliance checker on every log"
  bash "$(dirname "$0")/mlperf_check.sh" "$out/mllog" "$out/compliance.txt"

  echo "== 4. exports"
  $py -m dlbench results export --db "$db" --format json -o "$out/train.json"
  $py -m dlbench.report.train_export "$db" "$out/train.csv"
  $py -m dlbench report --db "$db" --markdown -o "$out/tables.md" --title "dlbench train proof"
  $py -m dlbench report --db "$db" -o "$out/report.html" --title "dlbench train proof" || true
  for tag in train-mlperf train-batches; do $py -m dlbench results show --db "$db" --tag "$tag"; done
} 2>&1 | tee "$out/train.log"
