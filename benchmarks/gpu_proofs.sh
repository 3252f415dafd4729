#!/usr/bin/env bash
# The runs that prove dlbench's GPU paths, in stages that each fit a 10-minute slot.
#   benchmarks/gpu_proofs.sh STAGE OUTDIR [DB]
# STAGE: spine   GPU tests, the default suite, the fidelity check
#        suites  GPU tests, the default suite, seed 002's table, then seed 000 (eager column
#                first) until the slot ends
#        final   the default suite, then seed 000 resumed until the slot ends
#        seed000 seed 000 resumed where the last stage stopped (rerun until complete)
#        ceilings  peak, MFU and roofline of the stored default suite, seed 002's fit (one GPU)
#        telemetry a 30 s ResNet-50 run beside nvidia-smi's power log, monitor, the default suite
#                  with energy, fidelity with telemetry on (one GPU)
#        memory    maxbatch of nine models in bf16 (resumed), -b auto, a batch sweep, then fp32 (one GPU)
#        scaling   scale (ddp; dp and ps; fp32), interconnect A/B, comm (two GPUs)
# SLOT_SECONDS (default 570) bounds the whole stage; a sweep cut by it stops cleanly (SIGINT).
# Everything dlbench writes goes to OUTDIR; DB (default OUTDIR/dlbench.db) may be an earlier
# stage's store, so --resume skips what it holds.
set -uo pipefail
stage=$1; out=$2; db=${3:-$out/dlbench.db}
mkdir -p "$out"
[ "$db" = "$out/dlbench.db" ] || cp "$db" "$out/dlbench.db"
db=$out/dlbench.db
source "$(dirname "$0")/gpu_env.sh"
log=$out/$stage.log
end=$((SECONDS + ${SLOT_SECONDS:-570}))
LEFT_MIN=10
py=python3
export_run() {  # name: export the latest run as JSON and CSV
  $py -m dlbench results export --db "$db" --run latest --format json -o "$out/$1.json"
  $py -m dlbench results export --db "$db" --run latest --format csv -o "$out/$1.csv"
}
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv
  case $stage in
    spine)
      $py -m pytest -q tests/test_gpu.py tests/test_throughput.py -p no:cacheprovider 2>&1 | tail -5
      $py -m dlbench run --db "$db" --tag default-suite; export_run default
      $py benchmarks/fidelity.py --out "$out/fidelity.json"
      ;;
    suites)
      $py -m pytest -q tests/test_gpu.py -p no:cacheprovider 2>&1 | tail -5
      $py -m dlbench run --db "$db" --tag default-suite; export_run default
      $py -m dlbench run --suite seed002 --db "$db" --tag seed002; export_run seed002
      # Seed 000, eager column first, until the slot ends; the next stage resumes it.
      timeout -s INT "$(left)" $py -m dlbench run --suite seed000 --db "$db" --resume --tag seed000
      ;;
    final)
      $py -m dlbench run --db "$db" --tag default-suite; export_run default
      timeout -s INT "$(left)" $py -m dlbench run --suite seed000 --db "$db" --resume --tag seed000
      $py -m dlbench results export --db "$db" --run all --format json -o "$out/all.json"
      $py -m dlbench results export --db "$db" --run all --format csv -o "$out/all.csv"
      ;;
    seed000)
      timeout -s INT "$(left)" $py -m dlbench run --suite seed000 --db "$db" --resume --tag seed000
      $py -m dlbench results export --db "$db" --run all --format json -o "$out/all.json"
      $py -m dlbench results export --db "$db" --run all --format csv -o "$out/all.csv"
      ;;
    ceilings)
      $py -m pytest -q -p no:cacheprovider tests/test_peak.py tests/test_mfu.py tests/test_reference.py 2>&1 | tail -3
      $py -m dlbench peak --db "$db" --tag peak; export_run peak
      run=$($py -c "from dlbench.store import Store; print([r.run_id for r in Store('$db').runs(tag='default-suite')][0])")
      $py -m dlbench roofline --db "$db" --run "$run" -o "$out/roofline"
      $py -m dlbench gpus --db "$db" -m vgg16 --mode eval
      ;;
    telemetry)
      $py -m pytest -q -p no:cacheprovider tests/test_telemetry.py 2>&1 | tail -3
      $py -m dlbench monitor --interval 1 --csv "$out/monitor.csv" > "$out/monitor.txt" 2>&1 & mon=$!
      nvidia-smi --query-gpu=timestamp,power.draw --format=csv -lms 100 > "$out/nvidia-smi-power.csv" & smi=$!
      $py -m dlbench throughput -m resnet50 -b 256 --precision bf16 --channels-last on \
          --min-time 30 --max-time 35 --db "$db" --tag rn50-telemetry -q --json > "$out/rn50.json"
      kill $smi
      $py benchmarks/compare_power.py "$out/rn50.json" "$out/nvidia-smi-power.csv"
      $py -m dlbench run --db "$db" --tag default-suite-telemetry -q
      kill $mon
      $py -m dlbench telemetry --db "$db" --run latest
      $py benchmarks/fidelity.py --out "$out/fidelity-telemetry.json"
      ;;
    memory)
      # The largest batch of every seed model and two modern ones, resumed until the slot ends
      # (rerun the stage with the same DB to go on): every bf16 search first (about a minute
      # each); then -b auto and a batch sweep (minutes; EXTRAS=0 leaves them out); then fp32,
      # transformers (cuBLAS, no autotuning) first.
      # BF16_MODELS / FP32_MODELS / MAXBATCH_TAG / GPU_TESTS=0 narrow a call; FP32_AUTOTUNE=1
      # autotunes the CNNs' fp32 searches too; AUTO_ARGS names the -b auto run's model and
      # options (best one whose search this store holds).
      all=vit_b_16,gpt2,resnet50,inception_v3,densenet161,resnet152,inception_v4,nasnet,vgg16
      [ "${GPU_TESTS:-1}" = 0 ] ||
        timeout 120 $py -m pytest -q -p no:cacheprovider tests/test_maxbatch.py -m gpu 2>&1 | tail -3
      maxbatch_models "${BF16_MODELS-$all}" "$db" "${MAXBATCH_TAG:-maxbatch}" bf16
      if [ "${EXTRAS:-1}" != 0 ] && [ $((end - SECONDS)) -gt 60 ]; then
        timeout -s INT "$(left)" $py -m dlbench throughput ${AUTO_ARGS:--m resnet50 --precision bf16 --channels-last on} \
            -b auto --max-time 5 --db "$db" --tag auto
        timeout -s INT "$(left)" $py -m dlbench throughput -m vit_b_16 --precision fp32 \
            -b 256,512,1024,2048 --max-time 3 --db "$db" --tag batch-sweep -q
      fi
      # fp32: the transformers as every other search; the CNNs with --no-autotune, since
      # cuDNN's true-fp32 autotuning took minutes a probe (VGG-16 batch 512: past 300 s on an
      # H200), which no slot holds. FP32_AUTOTUNE=1 autotunes them too.
      fp32=${FP32_MODELS-$all}
      for m in ${fp32//,/ }; do
        case $m in
          vit_b_16|gpt2) maxbatch_models "$m" "$db" "${MAXBATCH_TAG:-maxbatch}" fp32 ;;
          *) if [ "${FP32_AUTOTUNE:-0}" = 1 ]; then
               maxbatch_models "$m" "$db" "${MAXBATCH_TAG:-maxbatch}" fp32
             else
               maxbatch_models "$m" "$db" "${MAXBATCH_TAG:-maxbatch}" fp32 --no-autotune
             fi ;;
        esac
      done
      $py -m dlbench results export --db "$db" --tag "${MAXBATCH_TAG:-maxbatch}" -o "$out/maxbatch.json"
      ;;
    scaling)
      fast="--warmup 5 --warmup-time 0.5 --min-time 1 --max-time 4 --timeout 300 --pg-timeout 120"
      $py -m pytest -q -p no:cacheprovider tests/test_distributed.py tests/test_comm.py -m gpu 2>&1 | tail -3
      $py -m dlbench scale -m resnet50,inception_v3,vgg16,resnet152 --gpus 1,2 --strategy ddp \
          --precision bf16 --channels-last on $fast --db "$db" --tag scale-bf16
      $py -m dlbench scale -m resnet50 --gpus 1,2 --strategy dp,ps --precision bf16 \
          --channels-last on $fast --db "$db" --tag scale-dp-ps
      $py -m dlbench scale -m resnet50,vgg16 --gpus 1,2 --strategy ddp --precision fp32 $fast \
          --db "$db" --tag scale-fp32
      $py -m dlbench scale -m resnet50 --gpus 2 --strategy ddp --precision bf16 --channels-last on \
          --interconnect default,no-p2p,no-p2p+no-shm $fast --db "$db" --tag interconnect
      $py -m dlbench comm --gpus 2 --min 8B --max 1GiB --iters 20 --warmup 5 --db "$db" --tag comm
      $py -m dlbench results export --db "$db" --run all --format json -o "$out/all.json"
      ;;
  esac
} 2>&1 | tee "$log"
