#!/usr/bin/env bash
# Time to accuracy on real data, MLPerf-style, with the rules' recipe, on this machine's GPUs:
#   benchmarks/time_to_accuracy.sh OUTDIR [DATADIR] [GPUS]
#
# Does the recipe converge? cnn10 on Fashion-MNIST to the rules' target (0.90) within the rules'
# cap (15 epochs), with the hyperparameters the rules define for each global batch (peak
# learning rate 0.1 x global batch / 256, a linear warm-up, a cosine decay; docs/training.md):
#   1. one GPU: 5 seeds at each batch size of the published tables, 128, 256, 512, 1024, 2048;
#   2. each GPU count of GPUS above 1 (2, 4): 5 seeds at 512 per GPU (global 1024, 2048), DDP.
# It ends with the seeds converged per setup (benchmarks/seeds_converged.py): a result is valid,
# as MLPerf counts it, when at most one run in five hit the cap; the recipe's promise is that
# every setup is. Exit code 0 when every setup is valid, 3 otherwise.
# Every run writes an MLPerf log, checked against dlbench's rules (the benchmark's target and
# hyperparameters, taken from the rules, not from the log) by dlbench's checker, and by MLPerf's
# own compliance checker where mlperf-logging is installed; logs in OUTDIR/mllog.
#
# DATADIR: Fashion-MNIST's four idx files (train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz,
#   t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz). Without it, dlbench looks where
#   Debian's package puts them (apt-get install dataset-fashion-mnist). Nothing is downloaded.
# GPUS: GPU counts, default 1; 1,2 on two GPUs, 1,2,4 on four (DDP through torchrun); a list
#   without 1 (2,4) skips step 1.
# mlperf-logging is optional (pip install -e '.[train]'): without it the logs are written and
#   checked by dlbench alone, and the script says so.
#
# How long: step 1 took 194 s of dlbench's wall time on one H100 (25 runs, each 2.9 to 12.2 s to
#   train, bf16, the data held on the GPU: docs/training.md); step 2 about a minute per GPU count.
#
# Writes, in OUTDIR: dlbench.db (every run and epoch; the tables come from it), converged.md
# (seeds converged per setup), all.csv, all.json, tables.md (`dlbench report --markdown`),
# report.html (loss and accuracy against iteration and wall time), mllog/ and train.log.
# MODEL, DATASET, PRECISION, SEEDS and BATCHES override cnn10, fashion-mnist, bf16, 5 and
# 128,256,512,1024,2048 (a check of the script on a CPU, seconds: MODEL=tiny_mlp DATASET=mnist5k
# SEEDS=3 BATCHES=64 PRECISION=fp32 benchmarks/time_to_accuracy.sh OUT; the target and cap are
# the rules'; the rules' tiny_mlp recipe is sized for batch 64 only).
set -uo pipefail
usage="usage: $0 OUTDIR [DATADIR] [GPUS]"
out=${1:?$usage}; data=${2:-}; gpus=${3:-1}
source "$(dirname "$0")/lib.sh"
begin
nvlink_multicast_off
python3 -c "import mlperf_logging" 2>/dev/null ||
  echo "note: mlperf-logging is not installed: logs are written and checked by dlbench's own" \
       "rules checker only (pip install -e '.[train]' adds MLPerf's checker)" >&2
common=(--dataset "${DATASET:-fashion-mnist}" ${data:+--data-dir "$data"} -m "${MODEL:-cnn10}"
        --precision "${PRECISION:-bf16}" --seeds "${SEEDS:-5}" --db "$db" --log-dir "$out/mllog")
{
  if [[ ",$gpus," == *,1,* ]]; then
    echo "== 1. ${SEEDS:-5} seeds at each batch size on one GPU"
    dl train "${common[@]}" -b "${BATCHES:-128,256,512,1024,2048}" --gpus 1 --tag tta-1gpu
  fi
  for n in ${gpus//,/ }; do
    [ "$n" = 1 ] && continue
    echo "== 2. ${SEEDS:-5} seeds at 512 per GPU on $n GPUs"
    dl train "${common[@]}" -b 512 --gpus "$n" --tag "tta-${n}gpu"
  done
} 2>&1 | tee -a "$out/train.log"
python3 "$(dirname "$0")/seeds_converged.py" "$db" | tee "$out/converged.md"
status=${PIPESTATUS[0]}
export_results
exit "$status"
