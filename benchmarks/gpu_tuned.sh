#!/usr/bin/env bash
# The GPU proof of tuned mode on one GPU, in stages that each fit one slot (default 560 s):
#   benchmarks/gpu_tuned.sh OUTDIR STAGE
# OUTDIR/dlbench.db may hold the store of an earlier stage: later stages read the lever searches
# from it (--tuned uses what 'dlbench tune' found on this GPU) and resume from it.
#   tune     the lever-by-lever tables of ResNet-50 (batch 256) and GPT-2 (seq 1024, batch 16)
#   suite    the default suite, plain and tuned (dlbench run --tuned --resume)
#   seed002  seed 002's batch-16 table, fp32 and fp16, plain and tuned; then the fidelity of the
#            tuned path (tuned ResNet-50 against a bare loop written with the same techniques)
#   targets  the two levers built for the targets after the lever tables: ResNet-50 fp16 with
#            its whole step in a CUDA graph (fused SGD keeps GradScaler's check on the device),
#            against the same without the graph; GPT-2 compiled with its vocabulary padded
#   levers2  the next levers for the targets: ResNet-50 at batch 1024 with the fused fp16 graph;
#            the same at batch 512 with inductor's coordinate-descent tuning of its generated
#            kernels (an inductor variable, kept in each record's environment, and a tag of its
#            own: the config does not name it); GPT-2 at batch 64 with the padded vocabulary
#   levers3  ResNet-50's fused fp16 graph at batches 1536 and 1792 (the largest batch the memory
#            search found for eager bf16 is 1,792); the default suite tuned again (resumed: only
#            what the newer recipes change); the issue's own command, throughput --tuned, for
#            ResNet-50 and GPT-2
#   levers4  the loss compiled with the model (--compile-loss), off and on in one call: GPT-2's
#            tuned config (batch 32, padded vocabulary), ResNet-50's (fp16 graph, batch 1024);
#            then ResNet-50's tuned config with cuDNN's heuristics instead of its autotuning
#            (--no-autotune): what cudnn.benchmark buys there
#   levers5  GPT-2 with the loss compiled: its whole step in a CUDA graph, at batch 64, and
#            under max-autotune-no-cudagraphs (minutes of compilation: inductor times its GEMM
#            templates)
#   levers6  GPT-2 at batch 64 with the loss compiled: again as levers5 ran it, with fused SGD
#            kernels, and with fused kernels and the whole step in a CUDA graph
#   levers7  ResNet-50's tuned config (fp16, fused SGD, CUDA graph, b1024) under max-autotune-no-
#            cudagraphs. Its compilation outlasts one slot (a first try was still compiling
#            after 308 s, 11 convolution shapes timed), so the stage is run twice:
#            inductor's cache lives in INDUCTOR_CACHE (default /tmp/inductor-cache), the records
#            of what it timed (template choices, the best config of each generated kernel) are
#            packed into OUTDIR/autotune-records.tgz, and a later call given them in
#            .carry/autotune-records.tgz skips every choice already timed. That call's setup is
#            the remainder of the compilation, not the whole of it.
#   levers8  the issue's own command with the H100 recipe that now carries max-autotune,
#            throughput -m resnet50 --tuned, both configs with --profile 10; inductor's
#            autotuning records restored from .carry/autotune-records.tgz where given (the setup
#            shown is then the remainder of the compilation)
#   levers9  GPT-2's tuned config (bf16, padded vocabulary, compiled with its loss) at batches 64,
#            96 and 128 in one call: whether a batch past 64 still gains
#   profile  where the tuned configs' steps go (--profile 10: kernels by category, top kernels,
#            how busy the GPU was): ResNet-50's tuned config, the same eager in bf16 at batch
#            256 (the plain figure's setup), GPT-2's tuned config; first the GPU test of it
# Every command stops cleanly (SIGINT) at the slot's end and keeps what it measured.
set -uo pipefail
out=$1; stage=$2
mkdir -p "$out"
db=$out/dlbench.db
source "$(dirname "$0")/gpu_env.sh"
end=$((SECONDS + ${SLOT_SECONDS:-560}))
py=python3
short="--warmup 5 --warmup-time 1 --min-time 2 --max-time 5"
# Inductor's cache for the max-autotune stages, seeded with what an earlier call timed.
restore_autotune_records() {
  export TORCHINDUCTOR_CACHE_DIR=${INDUCTOR_CACHE:-/tmp/inductor-cache}
  mkdir -p "$TORCHINDUCTOR_CACHE_DIR"
  if [ -f .carry/autotune-records.tgz ]; then
    tar xzf .carry/autotune-records.tgz -C "$TORCHINDUCTOR_CACHE_DIR"
    echo "restored $(tar tzf .carry/autotune-records.tgz | wc -l) autotuning records"
  fi
}
{
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,power.limit --format=csv
  case $stage in
    tune)
      timeout -s INT "$(left)" $py -m dlbench tune -m resnet50 -b 256 $short --db "$db" \
          --tag tune-resnet50 -q
      timeout -s INT "$(left)" $py -m dlbench tune -m gpt2 -b 16 $short --db "$db" \
          --tag tune-gpt2 -q ;;
    suite)
      timeout -s INT "$(left)" $py -m dlbench run --tuned --resume --db "$db" --tag tuned-suite -q ;;
    seed002)
      timeout -s INT "$(left)" $py -m dlbench throughput -m vgg16,resnet152,densenet161 -b 16 \
          --precision fp32,fp16 --mode eval,train --method seed002 --tuned --resume $short \
          --db "$db" --tag tuned-seed002 -q
      timeout -s INT "$(left)" $py benchmarks/fidelity.py --model resnet50 --batch 256 \
          --precision bf16 --channels-last on --cuda-graph on --optimizer-impl fused \
          ${FIDELITY_COMPILE:+--compile $FIDELITY_COMPILE} --rounds 4 \
          --out "$out/fidelity-tuned.json" ;;
    targets)
      timeout -s INT "$(left)" $py -m dlbench throughput -m resnet50 -b 512 --precision fp16 \
          --channels-last on --compile default --optimizer-impl fused --cuda-graph on,off \
          $short --resume --db "$db" --tag targets-resnet50
      timeout -s INT "$(left)" $py -m dlbench throughput -m gpt2 -b 32 --precision bf16 \
          --compile default --pad-vocab --cuda-graph off,on $short --resume --db "$db" \
          --tag targets-gpt2 ;;
    levers2)
      rn50="-m resnet50 --precision fp16 --channels-last on --compile default --optimizer-impl fused --cuda-graph on"
      timeout -s INT "$(left)" $py -m dlbench throughput $rn50 -b 1024 $short --resume \
          --db "$db" --tag targets-resnet50-b1024
      TORCHINDUCTOR_COORDINATE_DESCENT_TUNING=1 timeout -s INT "$(left)" $py -m dlbench \
          throughput $rn50 -b 512 $short --db "$db" --tag targets-resnet50-coordinate-descent
      timeout -s INT "$(left)" $py -m dlbench throughput -m gpt2 -b 64 --precision bf16 \
          --compile default --pad-vocab $short --resume --db "$db" --tag targets-gpt2-b64 ;;
    levers3)
      rn50="-m resnet50 --precision fp16 --channels-last on --compile default --optimizer-impl fused --cuda-graph on"
      timeout -s INT "$(left)" $py -m dlbench throughput $rn50 -b 1536,1792 $short --resume \
          --db "$db" --tag targets-resnet50-b1536
      timeout -s INT "$(left)" $py -m dlbench run --tuned --resume --db "$db" --tag tuned-suite -q
      timeout -s INT "$(left)" $py -m dlbench throughput -m resnet50,gpt2 --tuned $short --resume \
          --db "$db" --tag tuned-throughput ;;
    levers4)
      rn50="-m resnet50 --precision fp16 --channels-last on --compile default --optimizer-impl fused --cuda-graph on -b 1024"
      timeout -s INT "$(left)" $py -m dlbench throughput -m gpt2 -b 32 --precision bf16 \
          --compile default --pad-vocab --compile-loss off,on $short --db "$db" \
          --tag targets-gpt2-loss
      timeout -s INT "$(left)" $py -m dlbench throughput $rn50 --compile-loss off,on $short \
          --db "$db" --tag targets-resnet50-loss
      timeout -s INT "$(left)" $py -m dlbench throughput $rn50 --no-autotune $short \
          --db "$db" --tag lever-cudnn-benchmark ;;
    levers5)
      gpt2="-m gpt2 --precision bf16 --pad-vocab --compile-loss on"
      timeout -s INT "$(left)" $py -m dlbench throughput $gpt2 -b 32 --compile default \
          --cuda-graph on $short --resume --db "$db" --tag targets-gpt2-loss-graph
      timeout -s INT "$(left)" $py -m dlbench throughput $gpt2 -b 64 --compile default \
          $short --resume --db "$db" --tag targets-gpt2-loss-b64
      timeout -s INT "$(left)" $py -m dlbench throughput $gpt2 -b 32 \
          --compile max-autotune-no-cudagraphs $short --resume --db "$db" \
          --tag targets-gpt2-max-autotune ;;
    levers6)
      gpt2="-m gpt2 -b 64 --precision bf16 --pad-vocab --compile default --compile-loss on"
      timeout -s INT "$(left)" $py -m dlbench throughput $gpt2 $short --db "$db" \
          --tag targets-gpt2-loss-b64
      timeout -s INT "$(left)" $py -m dlbench throughput $gpt2 --optimizer-impl fused \
          --cuda-graph off,on $short --db "$db" --tag targets-gpt2-loss-b64-fused ;;
    levers7)
      rn50="-m resnet50 --precision fp16 --channels-last on --optimizer-impl fused --cuda-graph on"
      rn50="$rn50 -b 1024 --compile max-autotune-no-cudagraphs"
      restore_autotune_records
      # Inductor's autotuning sees SIGINT late (60 s once): stop it early enough to pack.
      timeout -k 30 -s INT $(( $(left) - 60 )) $py -m dlbench throughput $rn50 $short \
          --db "$db" --tag targets-resnet50-max-autotune
      (cd "$TORCHINDUCTOR_CACHE_DIR" && find . -path '*/cache/*' -type f -o -name '*.best_config' \
          | tar czf - -T -) > "$out/autotune-records.tgz"
      echo "packed $(tar tzf "$out/autotune-records.tgz" | wc -l) autotuning records" \
          "($(stat -c %s "$out/autotune-records.tgz") bytes; the whole cache:" \
          "$(du -sh "$TORCHINDUCTOR_CACHE_DIR" | cut -f1))" ;;
    levers8)
      restore_autotune_records
      timeout -s INT "$(left)" $py -m dlbench throughput -m resnet50 --tuned --profile 10 \
          $short --db "$db" --tag tuned-resnet50-max-autotune ;;
    levers9)
      timeout -s INT "$(left)" $py -m dlbench throughput -m gpt2 -b 64,96,128 --precision bf16 \
          --pad-vocab --compile default --compile-loss on $short --db "$db" \
          --tag targets-gpt2-batches ;;
    profile)
      timeout -s INT "$(left)" $py -m pytest -q -p no:cacheprovider tests/test_gpu.py -k profile
      timeout -s INT "$(left)" $py -m dlbench throughput -m resnet50 --precision fp16 \
          --channels-last on --compile default --optimizer-impl fused --cuda-graph on -b 1024 \
          --profile 10 $short --db "$db" --tag profile-resnet50-tuned
      timeout -s INT "$(left)" $py -m dlbench throughput -m resnet50 --precision bf16 \
          --channels-last on -b 256 --profile 10 $short --db "$db" --tag profile-resnet50-eager
      timeout -s INT "$(left)" $py -m dlbench throughput -m gpt2 -b 64 --precision bf16 \
          --pad-vocab --compile default --compile-loss on --profile 10 $short --db "$db" \
          --tag profile-gpt2-tuned ;;
    *) echo "unknown stage $stage: tune, suite, seed002, targets, levers2 to levers9, profile"
       exit 2 ;;
  esac
  $py -m dlbench results export --db "$db" --run all --format json -o "$out/all.json"
  $py -m dlbench report --db "$db" --markdown -o "$out/tables.md"
  grep -v '^$' "$out/tables.md" | grep -i -v 'environment' | cut -c1-170 | tail -n 60
} 2>&1 | tee "$out/$stage.log"
