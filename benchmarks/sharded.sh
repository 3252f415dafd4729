#!/usr/bin/env bash
# Language-model training by strategy on this host's GPUs (2 or more):
#   benchmarks/sharded.sh OUTDIR [PART ...]
#
# The campaigns of docs/results/2026-11-2x-h200-sharded.md and 2026-11-4x-h100-sharded.md
# (whose pages give the commands as run; this script is their complete form). Sequences of
# 2,048 tokens, AdamW, bf16, every block compiled; each config REPEAT fresh torchrun jobs
# (default 1; REPEAT=3 gives each row its spread across jobs, which `dlbench compare` tests):
#   ceilings  dlbench peak (the bf16 matmul ceiling: MFU against the measured) and all_reduce
#             busbw at 1 MiB to 1 GiB (the what-if model's link)
#   llama1b   llama-3.2-1b at 1 and 2 GPUs: ddp, fsdp, then tp at 2 GPUs
#   llama3b   llama-3.2-3b (batch 1) the same
#   llama8b   llama-3.1-8b (batch 1) at 2 GPUs: fsdp with activation checkpointing (with AdamW
#             it needs about 128 GB before activations: it does not fit one 80 GB GPU)
#   levers    llama-3.2-1b under fsdp at 2 GPUs: 8 sequences per GPU, selective checkpointing,
#             fp8 (needs torchao); llama-3.1-8b with fp8 and checkpointing
#   four      with 4 or more GPUs: llama-3.2-1b fsdp and fsdp+tp (TP within pairs) on 4 GPUs,
#             llama-3.1-8b fsdp with checkpointing on 4 (skipped with a note on fewer GPUs)
#   offload   fsdp with CPU offload at 2 GPUs: llama-3.2-1b, then llama-3.1-8b with
#             checkpointing (its optimizer steps on the CPU: allow it ten minutes)
#   fidelity  dlbench's fsdp against a bare FSDP2 loop (benchmarks/fidelity.py --fsdp), 4 rounds
#   whatif    the what-if model against every multi-GPU run above (whatif-check.txt)
# With no PART, all but offload in this order (offload when named).
#
# How long, on two H200 or two H100: ceilings 30 s; llama1b 5 min and llama3b 5 min (each
# config starts its ranks, builds the model and compiles a block in 30 to 60 s before its
# window); llama8b 1 min; levers 5 min (fp8 compiles for more than a minute a config); four
# 4 min; offload 1B 2 min, 8B more than 5 min; fidelity about 4 min (1 min a round); whatif
# seconds. REPEAT multiplies every part but fidelity and whatif.
#
# Writes, in OUTDIR: dlbench.db (run again with the same OUTDIR and it resumes), all.csv,
# all.json, tables.md (the strategy table among them), report.html (with the memory-against-
# throughput chart), fidelity-fsdp.json, whatif-check.txt and a log per part.
set -uo pipefail
usage="usage: $0 OUTDIR [ceilings|llama1b|llama3b|llama8b|levers|four|offload|fidelity|whatif ...]"
out=${1:?$usage}; shift
parts=${*:-ceilings llama1b llama3b llama8b levers four fidelity whatif}
source "$(dirname "$0")/lib.sh"
begin ceilings llama1b llama3b llama8b levers four offload fidelity whatif
nvlink_multicast_off

S=(--precision bf16 --optimizer adamw --compile default --repeat "${REPEAT:-1}" --resume
   --db "$db")

ceilings() {
  dl peak --precision bf16 --verbs matmul,memory --db "$db" --tag peak
  dl comm --op all_reduce --min-bytes 1MiB --max-bytes 1GiB --factor 4 --db "$db" --tag comm
}
strategies() {  # strategies MODEL BATCH
  dl scale -m "$1" -b "$2" --gpus 1,2 --strategy ddp,fsdp "${S[@]}" --tag "$1"
  dl scale -m "$1" -b "$2" --gpus 2 --strategy tp "${S[@]}" --tag "$1"
}
llama1b() { strategies llama-3.2-1b 4; }
llama3b() { strategies llama-3.2-3b 1; }
llama8b() {
  dl scale -m llama-3.1-8b -b 1 --gpus 2 --strategy fsdp --checkpointing "${S[@]}" \
      --tag llama-3.1-8b
}
levers() {
  local one=(-m llama-3.2-1b --gpus 2 --strategy fsdp "${S[@]}" --tag llama-3.2-1b)
  dl scale "${one[@]}" -b 8
  dl scale "${one[@]}" --checkpointing selective
  dl scale "${one[@]}" --fp8
  dl scale -m llama-3.1-8b -b 1 --gpus 2 --strategy fsdp --fp8 --checkpointing "${S[@]}" \
      --tag llama-3.1-8b
}
gpus() { python3 -c "import torch; print(torch.cuda.device_count())"; }
four() {
  if [ "$(gpus)" -lt 4 ]; then echo "four: skipped: this host has $(gpus) GPU(s), not 4"; return 0; fi
  dl scale -m llama-3.2-1b -b 8 --gpus 4 --strategy fsdp,fsdp+tp --tp 2 "${S[@]}" \
      --tag llama-3.2-1b
  dl scale -m llama-3.1-8b -b 1 --gpus 4 --strategy fsdp --checkpointing "${S[@]}" \
      --tag llama-3.1-8b
}
offload() {
  dl scale -m llama-3.2-1b -b 8 --gpus 2 --strategy fsdp --offload "${S[@]}" --tag llama-3.2-1b
  dl scale -m llama-3.1-8b -b 1 --gpus 2 --strategy fsdp --offload --checkpointing "${S[@]}" \
      --timeout 1800 --tag llama-3.1-8b
}
fidelity() {
  python3 "$repo/benchmarks/fidelity.py" --fsdp --model llama-3.2-1b --gpus 2 --batch 4 \
      --seq-len 2048 --precision bf16 --compile default --out "$out/fidelity-fsdp.json"
}
whatif() { dl whatif --check --db "$db" --busbw-from "$db" | tee "$out/whatif-check.txt"; }

run_parts
export_results
