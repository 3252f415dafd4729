# Sourced by the GPU proof scripts: what every process they start needs, and the slot clock.
# A script sets end=$((SECONDS + slot)) after sourcing this; left prints the seconds to it.
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}src
# Multicast off in every process (the GPU hosts' rule); torchrun passes the environment on.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
left() { local floor=${LEFT_MIN:-5}; echo $((end - SECONDS > floor ? end - SECONDS : floor)); }
# Prefix a job's lines with its GPUs, so side-by-side jobs can be told apart: ... | lane 01
lane() { sed -u "s/^/[$1] /"; }
# The largest-batch searches of some models, resumed, one model at a time so that each model's
# throughput at its boundary is measured before the next model's searches begin (one invocation
# measures only after all its searches): maxbatch_models MODELS DB TAG [PRECISIONS] [ARGS...]
# PRECISIONS defaults to bf16,fp32; ARGS go to every search (e.g. --no-autotune). Not quiet:
# every probe prints a line, so a cut log says where it stood.
maxbatch_models() {
  local m models=$1 db=$2 tag=$3 precisions=${4:-bf16,fp32}
  shift $(( $# < 4 ? $# : 4 ))
  for m in ${models//,/ }; do
    [ $((end - SECONDS)) -gt 30 ] || break
    timeout -s INT "$(left)" python3 -m dlbench maxbatch -m "$m" --precision "$precisions" \
        --channels-last --tolerance 0.1 --max-time 2 --resume --db "$db" --tag "$tag" "$@"
  done
}
# One GPU's share of them (run it in the background, one per GPU): maxbatch_lane GPU MODELS DB
maxbatch_lane() {
  ( export CUDA_VISIBLE_DEVICES=$1
    maxbatch_models "$2" "$3" maxbatch-h200
  ) 2>&1 | lane "$1"
}
