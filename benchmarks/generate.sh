#!/usr/bin/env bash
# LLM generation on this machine's GPU: prefill, decode, TTFT, TPOT, the memory roofline:
#   benchmarks/generate.sh OUTDIR [PART ...]
#
# The campaigns of docs/results/2026-11-h100-generate.md and 2026-11-h200-generate.md, whose
# pages give the commands as run (this script is their complete form):
#   ceilings  dlbench peak: the bf16 matmul ceiling (prefill MFU) and the memory copy
#             bandwidth (the decode roofline), on the card the sweeps run on
#   llama1b   llama-3.2-1b, 128 prompt + 128 output tokens, bf16, batch 1, 8, 32, 64 and the
#             largest that fits, generate() (eager) and the compiled decode step with fused
#             projections (--tuned --fuse) side by side
#   llama8b   the same for llama-3.1-8b
#   llama3b   the same for llama-3.2-3b
#   fidelity  dlbench's decode loop against a bare loop of the same work
#             (benchmarks/fidelity.py --generate), for llama-3.2-1b and llama-3.1-8b at batch 1
# With no PART, all five in this order.
#
# How long, on one H100: ceilings 30 s; llama1b about 8 min and llama8b about 12 min (each
# compiled batch size compiles its decode step for 1 to 1.5 min before its first request);
# llama3b about 10 min; fidelity 3 min. On a host of two GPUs, run two parts at once with
# CUDA_VISIBLE_DEVICES=0 / =1 and two OUTDIRs, then `dlbench results merge` the stores.
#
# Writes, in OUTDIR: dlbench.db (run again with the same OUTDIR and it resumes), all.csv,
# all.json, tables.md, report.html, fidelity-1b.json, fidelity-8b.json and a log per part.
set -uo pipefail
usage="usage: $0 OUTDIR [ceilings|llama1b|llama8b|llama3b|fidelity ...]"
out=${1:?$usage}; shift
parts=${*:-ceilings llama1b llama8b llama3b fidelity}
source "$(dirname "$0")/lib.sh"
begin ceilings llama1b llama8b llama3b fidelity

# One model's sweep: sweep MODEL BATCHES [ARGS...]. A 30 s cap: a request of the largest batch
# takes several seconds, and three of them are the minimum.
sweep() {
  local model=$1 batches=$2; shift 2
  dl generate -m "$model" -b "$batches" --prompt-len 128 --output-len 128 --precision bf16 \
      --tuned --fuse --max-time 30 --resume --db "$db" --tag "$model" "$@"
}

ceilings() { dl peak --precision bf16 --verbs matmul,memory --db "$db" --tag peak; }
llama1b() { sweep llama-3.2-1b 1,8,32,64,auto; }
llama8b() { sweep llama-3.1-8b 1,8,32,64,auto; }
llama3b() { sweep llama-3.2-3b 1,8,32,64,auto; }
fidelity() {
  python3 "$repo/benchmarks/fidelity.py" --generate --model llama-3.2-1b --out "$out/fidelity-1b.json"
  python3 "$repo/benchmarks/fidelity.py" --generate --model llama-3.1-8b --out "$out/fidelity-8b.json"
}

run_parts
export_results
