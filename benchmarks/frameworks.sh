#!/usr/bin/env bash
# PyTorch vs JAX on this machine's GPU: the same models, the same timer, one store:
#   benchmarks/frameworks.sh OUTDIR [PART ...]
#
# Parts (default: all five, in this order):
#   throughput  both frameworks, one batch each: ResNet-50 (b128), VGG-16 (b64), the CIFAR-10
#               frameworks study's cnn10 (b256), ViT-B/16 (b64) and GPT-2 124M (b8 x 1024 tokens) in bf16, and
#               the CNNs (ResNet-50, VGG-16, cnn10) in true fp32; PyTorch eager, its CNNs in
#               both layouts (NCHW, its default, and channels_last NHWC, JAX's); a short
#               window each (--max-time 4), the first step (PyTorch: cuDNN autotuning; JAX: XLA
#               compilation) timed apart
#   compiled    PyTorch with torch.compile (mode default, CNNs channels_last) for the bf16
#               configs: the counterpart of JAX's jit-compiled step
#   fidelity    dlbench's JAX path against a bare JAX loop (benchmarks/fidelity.py --framework
#               jax, ResNet-50 b128 bf16, 2 rounds): the ratio must sit in 0.99-1.01
#   train       time to accuracy on Fashion-MNIST, cnn10 to the rules' 0.90, batch 256, one seed,
#               bf16 and fp32, in both frameworks (the same data order, schedule and MLPerf
#               log); each run's synthetic side measurement is cnn10's throughput
#   scale       JAX data parallel (one process, the batch sharded over the GPUs) beside PyTorch's
#               dp at 1 and 2 GPUs (ResNet-50 b128 bf16); skipped with a note on one GPU
# It ends with the comparison (tables.md: "PyTorch vs JAX"; report.html: its chart).
#
# JAX runs with its preallocation off (XLA_PYTHON_CLIENT_PREALLOCATE=false, dlbench's default
# for JAX), so its peak memory is what it used, not the 75% of the GPU it grabs by default.
# Each framework runs in its own process (one `dlbench` command each).
#
# How long: minutes a part on one H100 (JAX compiles each model, PyTorch autotunes fp32
# convolutions and torch.compile compiles each model; none of it was timed as a whole). The parts can run as separate commands into the same OUTDIR (one store):
#   benchmarks/frameworks.sh OUT throughput
#   benchmarks/frameworks.sh OUT compiled fidelity
#   benchmarks/frameworks.sh OUT train
#
# DATA: the folder of Fashion-MNIST's four idx files (default: where Debian's package puts
#   them, apt-get install dataset-fashion-mnist). Nothing is downloaded.
#
# Writes, in OUTDIR: dlbench.db (every result), fidelity-jax.json, all.csv, all.json, tables.md,
# report.html, and PART.log for each part.
#   e.g.  benchmarks/frameworks.sh results/2026-11-h100-frameworks
#         benchmarks/frameworks.sh /tmp/fw throughput     # one part
set -uo pipefail
usage="usage: $0 OUTDIR [throughput|compiled|fidelity|train|scale ...]"
out=${1:?$usage}; shift
parts=${*:-throughput compiled fidelity train scale}
source "$(dirname "$0")/lib.sh"
begin throughput compiled fidelity train scale
nvlink_multicast_off
export XLA_PYTHON_CLIENT_PREALLOCATE=${XLA_PYTHON_CLIENT_PREALLOCATE:-false}
data=${DATA:-}
python3 -c "import jax, flax, optax" 2>/dev/null ||
  { echo "JAX, Flax and Optax are needed: pip install -e '.[jax]' (and JAX's CUDA plugin)" >&2
    exit 2; }
window=(--warmup 3 --warmup-time 0.5 --min-time 1.5 --max-time 4 --db "$db")
# SMOKE=1: the same commands on the CPU with the tiny test models, in about 3 minutes (a check
# of the script itself; its figures mean nothing).
cnns="resnet50:128 vgg16:64 cnn10:256"; others="vit_b_16:64 gpt2:8"; tta=(-m cnn10 -b 256); dev=()
fid=(--model resnet50 --batch 128 --precision bf16 --rounds 2); precs="bf16 fp32"
ds=(--dataset fashion-mnist ${data:+--data-dir "$data"})
declare -A layouts=([torch]="--channels-last off,on" [jax]="")
if [ -n "${SMOKE:-}" ]; then
  cnns="tiny_cnn:8"; others="tiny_gpt:4"; dev=(--device cpu)
  tta=(-m cnn10_small -b 256 --max-epochs 1 --target 0.5 --throughput-steps 3)
  ds=(--dataset mnist5k); precs=fp32
  fid=(--device cpu --rounds 1)
  window=(--warmup 1 --warmup-time 0 --min-time 0.2 --max-time 1 --telemetry-interval 0
          --db "$db")
fi

throughput() {
  local fw m
  for fw in torch jax; do
    echo "== throughput, $fw"
    for m in $cnns; do
      # PyTorch in both layouts; JAX's models take NHWC and XLA picks the rest.
      dl throughput --framework "$fw" -m "${m%:*}" -b "${m#*:}" --precision bf16,fp32 \
        ${layouts[$fw]} "${dev[@]}" "${window[@]}"
    done
    for m in $others; do
      dl throughput --framework "$fw" -m "${m%:*}" -b "${m#*:}" --precision bf16 "${dev[@]}" \
        "${window[@]}"
    done
  done
}

compiled() {
  local m
  echo "== throughput, torch compiled (bf16)"
  for m in $cnns; do
    dl throughput -m "${m%:*}" -b "${m#*:}" --precision bf16 --channels-last on \
      --compile default "${dev[@]}" "${window[@]}"
  done
  for m in $others; do
    dl throughput -m "${m%:*}" -b "${m#*:}" --precision bf16 --compile default "${dev[@]}" \
      "${window[@]}"
  done
}

fidelity() {
  python3 "$repo/benchmarks/fidelity.py" --framework jax "${fid[@]}" --out "$out/fidelity-jax.json"
}

train() {
  local fw prec
  for prec in $precs; do
    for fw in torch jax; do
      echo "== train ${tta[1]} on ${ds[1]}, $fw, $prec"
      dl train --framework "$fw" "${ds[@]}" "${tta[@]}" \
        --precision "$prec" --seeds 1 "${dev[@]}" --db "$db" --log-dir "$out/mllog" --quiet
    done
  done
}

scale() {
  local n
  n=$(python3 -c "import torch; print(torch.cuda.device_count())")
  [ -n "${SMOKE:-}" ] && n=0
  if [ "$n" -lt 2 ]; then
    echo "scale: $n GPU visible; the 2-GPU columns need a host with two (skipped)"
    return 0
  fi
  dl scale --framework torch --strategy dp -m resnet50 -b 128 --precision bf16 --gpus 1,2 \
    "${window[@]}"
  dl scale --framework jax --strategy dp -m resnet50 -b 128 --precision bf16 --gpus 1,2 \
    "${window[@]}"
}

run_parts
export_results
