# Sourced by the GPU proof scripts: what every process they start needs, and the slot clock.
# A script sets end=$((SECONDS + slot)) after sourcing this; left prints the seconds to it.
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}src
# Multicast off in every process (the GPU hosts' rule); torchrun passes the environment on.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
left() { local floor=${LEFT_MIN:-5}; echo $((end - SECONDS > floor ? end - SECONDS : floor)); }
