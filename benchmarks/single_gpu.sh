#!/usr/bin/env bash
# The single-GPU tables of the H100 campaign, measured on this machine's GPU:
#   benchmarks/single_gpu.sh OUTDIR [PART ...]
#
# Reproduces docs/results/2026-11-h100.md (and the one-H200 rows of
# docs/results/2026-11-4x-h200.md):
#   suites    the default suite (dlbench run), the classic-cnn suite (six CNNs, fp16 and fp32,
#             eager and compiled) and the ms-per-batch suite (batch 16, ms per batch)
#   ceilings  dlbench peak; MFU and the roofline of the default suite; published GPUs beside it
#   energy    a 30 s ResNet-50 run beside nvidia-smi's power log, the two energy figures side by
#             side (benchmarks/compare_power.py); the default suite again with its energy table
#   memory    the largest batch of nine models in bf16 and fp32 and the throughput there
#             (dlbench maxbatch), -b auto, and a batch sweep with its out-of-memory points
#   fidelity  dlbench against a bare training loop of the same config (benchmarks/fidelity.py)
# With no PART, all five in this order.
#
# How long, on one H100: suites about 70 min (the classic-cnn suite compiles each model for up
# to 7 min, and cuDNN autotunes fp32 convolutions for up to 5 min before the first step),
# ceilings 2 min, energy 6 min, memory about an hour, fidelity 3 min.
#
# Writes, in OUTDIR: dlbench.db (every result; run the script again with the same OUTDIR and it
# resumes where it stopped, skipping what the store holds), all.csv and all.json (its export),
# tables.md (every table, `dlbench report --markdown`), report.html, roofline.png/.svg,
# nvidia-smi-power.csv, rn50-energy.json, fidelity.json, and one log per part.
# Every table of the campaign page comes out of the store with the `dlbench results show` or
# `dlbench report` command the page gives beside it.
#
# One GPU: the first visible one (CUDA_VISIBLE_DEVICES=N picks another). Needs a CUDA GPU and
# nvidia-smi; pip install -e '.[gpu,report]' for telemetry and plots.
set -uo pipefail
usage="usage: $0 OUTDIR [suites|ceilings|energy|memory|fidelity ...]"
out=${1:?$usage}; shift
parts=${*:-suites ceilings energy memory fidelity}
source "$(dirname "$0")/lib.sh"
begin suites ceilings energy memory fidelity
# The newest run of a tag that holds results: newest_run TAG
newest_run() {
  dl results ls --db "$db" --tag "$1" --json | python3 -c \
      'import json, sys; print(next(r["run_id"] for r in json.load(sys.stdin) if r["results"]))'
}
# The largest-batch searches, one model at a time so each model's throughput at its boundary
# is measured before the next search starts: searches MODELS PRECISION [ARGS...]
searches() {
  local m models=$1 precision=$2; shift 2
  for m in ${models//,/ }; do
    dl maxbatch -m "$m" --precision "$precision" --channels-last --tolerance 0.1 --max-time 2 \
        --resume --db "$db" --tag maxbatch "$@"
  done
}

suites() {
  dl run --db "$db" --tag default-suite --resume
  dl run --suite classic-cnn --db "$db" --tag classic-cnn --resume
  dl run --suite ms-per-batch --db "$db" --tag ms-per-batch --resume
  dl results show --db "$db" --tag classic-cnn --view classic-cnn
  dl results show --db "$db" --tag ms-per-batch --view ms-per-batch
}

ceilings() {
  dl peak --db "$db" --tag peak
  dl run --db "$db" --tag default-suite --resume -q   # the roofline's points (kept if measured)
  dl roofline --db "$db" --run "$(newest_run default-suite)" -o "$out/roofline"
  dl gpus --db "$db" -m vgg16 --mode eval
}

energy() {
  # nvidia-smi's own power log of the same GPU, every 100 ms, beside a 30 s window.
  local gpu=${CUDA_VISIBLE_DEVICES:-0} smi
  nvidia-smi -i "${gpu%%,*}" --query-gpu=timestamp,power.draw --format=csv -lms 100 \
      > "$out/nvidia-smi-power.csv" &
  smi=$!
  dl throughput -m resnet50 -b 256 --precision bf16 --channels-last on --min-time 30 \
      --max-time 35 --db "$db" --tag rn50-energy -q --json > "$out/rn50-energy.json"
  kill "$smi"
  python3 "$repo/benchmarks/compare_power.py" "$out/rn50-energy.json" "$out/nvidia-smi-power.csv"
  # The default suite's energy table (every result carries its telemetry).
  dl run --db "$db" --tag default-suite --resume -q
  dl telemetry --db "$db" --run "$(newest_run default-suite)"
}

memory() {
  local all=vit_b_16,gpt2,resnet50,inception_v3,densenet161,resnet152,inception_v4,nasnet,vgg16
  searches "$all" bf16
  dl throughput -m resnet50 --precision bf16 --channels-last on -b auto --max-time 5 \
      --db "$db" --tag auto
  dl throughput -m gpt2 --precision bf16 -b auto --max-time 5 --db "$db" --tag auto
  dl throughput -m vit_b_16 --precision fp32 -b 256,512,1024,2048 --max-time 3 --db "$db" \
      --tag batch-sweep -q
  # fp32: the transformers as above; the CNNs with cuDNN's heuristics (--no-autotune), since
  # its true-fp32 autotuning takes minutes per probe at these batches. VGG-16's steps near its
  # boundary take tens of seconds: no warm-up and two measured steps there.
  searches vit_b_16,gpt2 fp32
  searches resnet50,inception_v3,densenet161,resnet152,inception_v4,nasnet fp32 --no-autotune
  searches vgg16 fp32 --no-autotune --warmup 0 --warmup-time 0 --min-steps 2
}

fidelity() {
  python3 "$repo/benchmarks/fidelity.py" --out "$out/fidelity.json"
}

run_parts
export_results
