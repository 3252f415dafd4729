#!/usr/bin/env bash
# The multi-GPU tables of the H200 campaigns, measured on this host's GPUs:
#   benchmarks/multi_gpu.sh OUTDIR [PART ...]
#
# Reproduces docs/results/2026-11-4x-h200.md and docs/results/2026-11-8x-h200.md on a host of
# N GPUs (2 or more):
#   scaling       data-parallel scaling (ddp) at 1, 2, 4, ... and N GPUs: the six classic CNNs in
#                 bf16 with channels_last (batch per GPU = the model's default), and in true fp32
#                 (batch 256 per GPU, NASNet 64)
#   strategies    ddp against nn.DataParallel (dp) and a parameter server (ps) at 1 and 2 GPUs:
#                 ResNet-50, Inception v3, VGG-16, ResNet-152 in bf16 and in fp32
#   interconnect  the NCCL transport A/B (NVLink or PCIe peer-to-peer, host shared memory,
#                 sockets) at 2 GPUs (four models) and at N GPUs (ResNet-50, VGG-16)
#   comm          collectives (nccl-tests' algbw and busbw, every element checked): all five at 2
#                 ranks to 1 GiB, all_reduce at 2 ranks under each transport, three at N ranks
#                 to 4 GiB
#   whatif        the alpha-beta model against every multi-GPU run above (whatif-check.txt)
# With no PART, all five in this order.
#
# How long, on four H200: scaling about 40 min (a few seconds of window per config; process
# start, model build and cuDNN autotuning take most of it, fp32 NASNet and VGG-16 minutes),
# strategies 20 min, interconnect 10 min, comm 5 min, whatif seconds. On eight GPUs add about
# half again.
#
# Writes, in OUTDIR: dlbench.db (every result; run the script again with the same OUTDIR and it
# resumes, skipping what the store holds), all.csv and all.json (its export), tables.md
# (`dlbench report --markdown`: the scaling, interconnect and collective tables), report.html,
# whatif-check.txt, and one log per part.
#
# The windows are short, as published (at least 5 steps and 1 s, at most 3 s: WINDOW below);
# WINDOW= (empty) uses dlbench's own stopping rule, longer windows with tighter intervals.
# GPUS=1,2,4 picks the GPU counts of the scaling part; CUDA_VISIBLE_DEVICES the GPUs.
set -uo pipefail
usage="usage: $0 OUTDIR [scaling|strategies|interconnect|comm|whatif ...]"
out=${1:?$usage}; shift
parts=${*:-scaling strategies interconnect comm whatif}
source "$(dirname "$0")/lib.sh"
begin scaling strategies interconnect comm whatif
nvlink_multicast_off
n=$(python3 -c "import torch; print(torch.cuda.device_count())")
[ "$n" -ge 2 ] || { echo "needs 2 or more GPUs; this host shows $n" >&2; exit 2; }
# 1, 2, 4, ... below N, then N
counts() {
  local c=1 s=1
  while [ $((c * 2)) -lt "$n" ]; do c=$((c * 2)); s="$s,$c"; done
  echo "$s,$n"
}
gpus=${GPUS:-$(counts)}
window=${WINDOW-"--warmup 3 --warmup-time 0.5 --min-steps 5 --min-time 1 --max-time 3"}
six=resnet50,inception_v3,vgg16,resnet152,inception_v4,nasnet
four=resnet50,inception_v3,vgg16,resnet152
scale() { dl scale "$@" $window --resume --db "$db" -q; }

scaling() {
  scale -m $six --gpus "$gpus" --precision bf16 --channels-last on --tag scale-bf16
  scale -m $four,inception_v4 -b 256 --gpus "$gpus" --precision fp32 --tag scale-fp32
  scale -m nasnet -b 64 --gpus "$gpus" --precision fp32 --tag scale-fp32
}

strategies() {
  scale -m $four --gpus 1,2 --strategy ddp,dp,ps --precision bf16 --channels-last on \
      --tag strategies
  scale -m $four -b 256 --gpus 1,2 --strategy ddp,dp,ps --precision fp32 --tag strategies
}

interconnect() {
  scale -m $four --gpus 2 --interconnect default,no-p2p,no-p2p+no-shm --precision bf16 \
      --channels-last on --tag interconnect
  [ "$n" -gt 2 ] && scale -m resnet50,vgg16 --gpus "$n" \
      --interconnect default,no-p2p,no-p2p+no-shm --precision bf16 --channels-last on \
      --tag interconnect
}

comm() {
  dl comm --gpus 2 --max 1GiB --iters 10 --warmup 3 \
      --op all_reduce,all_gather,reduce_scatter,broadcast,all_to_all --db "$db" --tag comm-2 -q
  dl comm --gpus 2 --min 1MiB --max 1GiB --factor 4 --op all_reduce \
      --interconnect no-p2p,no-p2p+no-shm --iters 10 --warmup 3 --db "$db" --tag comm-2 -q
  [ "$n" -gt 2 ] && dl comm --gpus "$n" --max 4GiB --iters 10 --warmup 3 \
      --op all_reduce,all_gather,reduce_scatter --db "$db" --tag "comm-$n" -q
}

whatif() {
  dl whatif --check --db "$db" --busbw-from "$db" > "$out/whatif-check.txt" 2>&1
  tail -n 4 "$out/whatif-check.txt"
}

nvidia-smi topo -m 2>/dev/null | tee "$out/topology.txt"
run_parts
export_results
