#!/usr/bin/env bash
# The HTML report of a result store, and a PNG of the whole page taken in headless Chromium.
#   benchmarks/report_screenshot.sh STORE.db OUT.png [dlbench report flags, e.g. --tag seed000]
# The store is copied to a temporary folder first (the committed stores under results/ are never
# opened in place); the report is written beside the PNG (OUT.html). Exits non-zero when the
# page raised a console error in the browser. Needs Chromium (apt-get install chromium).
set -euo pipefail
usage="usage: $0 STORE.db OUT.png [dlbench report flags]"
db=${1:?$usage}; png=${2:?$usage}; shift 2
repo=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONPATH="$repo/src${PYTHONPATH:+:$PYTHONPATH}"
png=$(realpath -m "$png"); html=${png%.png}.html
mkdir -p "$(dirname "$png")"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cp "$db" "$tmp/dlbench.db"
# from the copy's folder, so the report names the store "dlbench.db", not a temporary path
(cd "$tmp" && python3 -m dlbench report --db dlbench.db -o "$html" "$@")
python3 -m dlbench.report.browser "$html" --png "$png"
echo "wrote $html and $png" >&2
