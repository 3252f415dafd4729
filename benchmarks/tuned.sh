#!/usr/bin/env bash
# Tuned mode on this machine's GPU: what the hardware does once the levers are pulled.
#   benchmarks/tuned.sh OUTDIR [PART ...]
#
# Reproduces the tuned-mode tables of docs/results/2026-11-h100.md:
#   search    dlbench tune: the lever-by-lever tables of ResNet-50 (batch 256) and GPT-2 (seq
#             1024, batch 16); --tuned below then uses what they found on this GPU, unless a
#             committed recipe for this GPU goes further than them
#   suite     the default suite plain and tuned (dlbench run --tuned)
#   ms        the ms-per-batch suite's configs plain and tuned (batch 16, forward + backward)
#   levers    the levers measured one at a time on the tuned configs: fused SGD kernels and a
#             whole-step CUDA graph for fp16 ResNet-50, batch 1024 and 1536/1792, the GPT-2
#             padded vocabulary and the loss compiled with the model, batch 64/96/128,
#             max-autotune, cuDNN's heuristics against its autotuning
#   targets   throughput -m resnet50 --tuned and throughput -m gpt2 --tuned, with kernel profiles
#   profile   where the step's time goes (--profile 10) for ResNet-50 eager and its tuned
#             config compiled by default, and GPT-2's tuned config
#   fidelity  the tuned path (CUDA graph, fused SGD) against a bare loop written the same way
# With no PART, all seven in this order.
#
# How long, on one H100: search 6 min, suite 10 min, ms 6 min, levers about 40 min (two
# max-autotune compilations of several minutes each), targets 10 min from a cold cache (the
# ResNet-50 recipe compiles under max-autotune), profile 4 min, fidelity 4 min.
# INDUCTOR_RECORDS=results/pt2.11-cu130-h100-80gb-hbm3/autotune-records.tgz seeds Inductor's
# cache with what max-autotune timed for ResNet-50's tuned config on an H100 with torch 2.11
# (anything else re-times what does not match); INDUCTOR_CACHE (default OUTDIR/inductor-cache)
# is where that cache lives.
#
# Writes, in OUTDIR: dlbench.db (every result; the same OUTDIR again resumes), all.csv,
# all.json, tables.md (the lever, tuned-mode and kernel tables), report.html,
# fidelity-tuned.json, and one log per part.
set -uo pipefail
usage="usage: $0 OUTDIR [search|suite|ms|levers|targets|profile|fidelity ...]"
out=${1:?$usage}; shift
parts=${*:-search suite ms levers targets profile fidelity}
source "$(dirname "$0")/lib.sh"
begin search suite ms levers targets profile fidelity
export TORCHINDUCTOR_CACHE_DIR=${INDUCTOR_CACHE:-$out/inductor-cache}
mkdir -p "$TORCHINDUCTOR_CACHE_DIR"
[ -n "${INDUCTOR_RECORDS:-}" ] && tar xzf "$INDUCTOR_RECORDS" -C "$TORCHINDUCTOR_CACHE_DIR"
# The windows of the published tables: 5 warm-up steps and 1 s, then 2 to 5 s measured.
short=(--warmup 5 --warmup-time 1 --min-time 2 --max-time 5)
rn50=(-m resnet50 --precision fp16 --channels-last on --optimizer-impl fused)
gpt2=(-m gpt2 --precision bf16 --pad-vocab)
# --resume skips a config the store holds (the levers share several); the profiles and the
# targets run without it: --profile is not part of a config's identity, so resuming would skip
# a profile whose config was measured before.
tp() { dl throughput "$@" "${short[@]}" --db "$db"; }

search() {
  dl tune -m resnet50 -b 256 "${short[@]}" --db "$db" --tag tune-resnet50 -q
  dl tune -m gpt2 -b 16 "${short[@]}" --db "$db" --tag tune-gpt2 -q
}

suite() {
  dl run --tuned --resume --db "$db" --tag tuned-suite -q
}

ms() {
  tp -m vgg16,resnet152,densenet161 -b 16 --precision fp32,fp16 --mode eval,train \
      --method fwd-bwd --tuned --resume --tag tuned-ms-per-batch -q
}

levers() {
  tp "${rn50[@]}" -b 512 --compile default --cuda-graph off,on --resume --tag levers-resnet50
  tp "${rn50[@]}" -b 1024,1536,1792 --compile default --cuda-graph on --resume \
      --tag levers-resnet50
  tp "${rn50[@]}" -b 1024 --compile default --cuda-graph on --compile-loss off,on \
      --resume --tag levers-resnet50
  tp "${rn50[@]}" -b 1024 --compile default --cuda-graph on --no-autotune --resume \
      --tag levers-resnet50
  tp "${rn50[@]}" -b 1024 --compile max-autotune-no-cudagraphs --cuda-graph on \
      --resume --tag levers-resnet50
  tp "${gpt2[@]}" -b 32 --compile default --cuda-graph off,on --resume --tag levers-gpt2
  tp "${gpt2[@]}" -b 32 --compile default --compile-loss off,on --resume --tag levers-gpt2
  tp "${gpt2[@]}" -b 32 --compile default --compile-loss on --cuda-graph on --resume \
      --tag levers-gpt2
  tp "${gpt2[@]}" -b 64,96,128 --compile default --compile-loss on --resume --tag levers-gpt2
  tp "${gpt2[@]}" -b 64 --compile default --compile-loss on --optimizer-impl fused \
      --cuda-graph off,on --resume --tag levers-gpt2
  tp "${gpt2[@]}" -b 32 --compile max-autotune-no-cudagraphs --compile-loss on \
      --resume --tag levers-gpt2
  # cuDNN's autotuning against its heuristics, eager, batch 256
  tp -m resnet50 -b 256 --precision bf16,fp32 --channels-last on --resume --tag levers-cudnn
  tp -m resnet50 -b 256 --precision bf16,fp32 --channels-last on --no-autotune \
      --resume --tag levers-cudnn
}

targets() {
  tp -m resnet50 --tuned --profile 10 --tag tuned-resnet50
  tp -m gpt2 --tuned --tag tuned-gpt2
}

profile() {
  tp "${rn50[@]}" -b 1024 --compile default --cuda-graph on --profile 10 --tag profile
  tp -m resnet50 -b 256 --precision bf16 --channels-last on --profile 10 --tag profile
  tp "${gpt2[@]}" -b 64 --compile default --compile-loss on --profile 10 --tag profile
}

fidelity() {
  python3 "$repo/benchmarks/fidelity.py" --model resnet50 --batch 256 --precision bf16 \
      --channels-last on --cuda-graph on --optimizer-impl fused --rounds 4 \
      --out "$out/fidelity-tuned.json"
}

run_parts
export_results
