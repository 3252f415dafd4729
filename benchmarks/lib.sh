# Shared by the benchmark scripts (sourced, not run): where dlbench is, the output folder and
# its store, running the parts a script was asked for, and the exports every script ends with.
# The sourcing script sets `out` (and `parts`, `usage` where it has parts) first.

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PYTHONPATH="$repo/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
db=$out/dlbench.db
dl() { python3 -m dlbench "$@"; }

# begin [KNOWN...]: every asked-for part is one of KNOWN (checked before anything is made or
# run), then the output folder.
begin() {
  local part known
  for part in ${parts:-}; do
    for known in "$@"; do [ "$part" = "$known" ] && continue 2; done
    echo "$usage" >&2; exit 2
  done
  mkdir -p "$out"
}

# NVLink multicast (NVLS, symmetric-memory multicast) off: some hosts' GPUs or drivers do not
# support it, and a collective that tries it there fails or hangs. dlbench sets these on every
# rank it starts; they are exported here too for anything else a script runs. Set any of them
# before calling the script to override.
nvlink_multicast_off() {
  export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
  export TORCH_SYMM_MEM_DISABLE_MULTICAST=${TORCH_SYMM_MEM_DISABLE_MULTICAST:-1}
  export NVSHMEM_DISABLE_NVLS=${NVSHMEM_DISABLE_NVLS:-1}
}

# run_parts: each asked-for part (a function of the script), its output also in OUT/PART.log.
run_parts() {
  local part
  for part in $parts; do
    $part 2>&1 | tee -a "$out/$part.log"
  done
}

# export_results: the store as CSV and JSON, every table as Markdown, and the HTML report.
export_results() {
  if [ ! -f "$db" ]; then
    echo "no store at $db: nothing was measured into one (fidelity writes its own JSON)"
    return 0
  fi
  dl results export --db "$db" --format csv -o "$out/all.csv"
  dl results export --db "$db" --format json -o "$out/all.json"
  dl report --db "$db" --markdown -o "$out/tables.md"
  dl report --db "$db" -o "$out/report.html" || echo "no HTML report: pip install -e '.[report]'"
  echo "results: $db; tables: $out/tables.md"
}
