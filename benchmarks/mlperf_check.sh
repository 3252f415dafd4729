#!/usr/bin/env bash
# MLPerf's compliance checker, its own command line, on every MLPerf log in a folder:
#   benchmarks/mlperf_check.sh MLLOGDIR OUTFILE
# Prints and writes one PASS/FAIL line per log; the checker's own output goes to
# OUTFILE's folder as compliance_checker.log. mlperf-logging must be importable.
set -uo pipefail
dir=$1; out=$2
py=python3
rules=$($py -c "from dlbench.training.mlperf import rules_path; print(rules_path())")
ruleset=$($py -c "from dlbench.training.mlperf import latest_ruleset; print(latest_ruleset())")
for f in "$dir"/*.log; do
  [ -e "$f" ] || continue
  if $py -m mlperf_logging.compliance_checker --usage training --ruleset "$ruleset" \
      --config "$rules" --log_output "$(dirname "$out")/compliance_checker.log" "$f" \
      > /dev/null 2>&1; then
    echo "PASS $(basename "$f")"
  else
    echo "FAIL $(basename "$f")"
  fi
done 2>&1 | tee "$out"
echo "(a run that failed to reach the target logs 'aborted' and fails the checker by design)"
