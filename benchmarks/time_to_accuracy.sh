#!/usr/bin/env bash
# Time to accuracy on real data, MLPerf-style, on this machine's GPUs:
#   benchmarks/time_to_accuracy.sh OUTDIR [DATADIR] [GPUS]
#
# Reproduces the time-to-accuracy tables of docs/results/2026-11-h100.md (one GPU) and
# docs/results/2026-11-4x-h200.md (1, 2 and 4 GPUs):
#   1. cnn10 on Fashion-MNIST to 0.90 test accuracy, 5 seeds at batch 512 per GPU, at most 15
#      epochs, at each GPU count: time to train per seed, epochs to converge, the olympic mean,
#      and the throughput beside it (real data, the input pipeline alone, synthetic data).
#   2. The epoch table over batch sizes: 128, 256, 1024 and 2048 per GPU, one seed each, at most
#      20 epochs (batch 512 comes from step 1).
# Every run writes an MLPerf log, checked by MLPerf's compliance checker; log and verdict are
# kept in the record, and the log files in OUTDIR/mllog.
#
# DATADIR: Fashion-MNIST's four idx files (train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz,
#   t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz). Without it, dlbench looks where
#   Debian's package puts them (apt-get install dataset-fashion-mnist). Nothing is downloaded.
# GPUS: GPU counts, default 1; 1,2 on two GPUs, 1,2,4 on four (DDP through torchrun).
# Needs mlperf-logging: pip install -e '.[train]'.
#
# How long: step 1 about 1 min per GPU count on an H100 or H200 (5 seeds of 5-20 s plus start-up),
# step 2 about 2 min per GPU count.
#
# Writes, in OUTDIR: dlbench.db (every run and epoch; the tables come from it), all.csv,
# all.json, tables.md (`dlbench report --markdown`), report.html (loss and accuracy against
# iteration and wall time), mllog/ and train.log.
# MODEL, DATASET, TARGET and PRECISION override cnn10, fashion-mnist, 0.90 and bf16 (a quick
# check on a CPU: MODEL=tiny_mlp DATASET=mnist5k TARGET=0.85 benchmarks/time_to_accuracy.sh OUT).
set -uo pipefail
usage="usage: $0 OUTDIR [DATADIR] [GPUS]"
out=${1:?$usage}; data=${2:-}; gpus=${3:-1}
source "$(dirname "$0")/lib.sh"
begin
nvlink_multicast_off
python3 -c "import mlperf_logging" 2>/dev/null ||
  { echo "mlperf-logging is not installed: pip install -e '.[train]'" >&2; exit 2; }
common=(--dataset "${DATASET:-fashion-mnist}" ${data:+--data-dir "$data"} -m "${MODEL:-cnn10}"
        --target "${TARGET:-0.90}" --gpus "$gpus" --precision "${PRECISION:-bf16}" --db "$db"
        --log-dir "$out/mllog")
{
  echo "== 1. 5 seeds at batch 512 per GPU, GPUs $gpus"
  dl train "${common[@]}" -b 512 --seeds 5 --max-epochs 15 --tag train-mlperf
  echo "== 2. the epoch table: batches 128, 256, 1024, 2048 per GPU, GPUs $gpus"
  dl train "${common[@]}" -b 128,256,1024,2048 --seeds 1 --max-epochs 20 --tag train-batches
} 2>&1 | tee -a "$out/train.log"
export_results
