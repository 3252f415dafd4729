#!/usr/bin/env bash
# The HTML report of a result store, and a PNG of the whole page taken in headless Chromium:
#   benchmarks/report_screenshot.sh STORE.db|STORE.db.gz OUT.png [dlbench report flags]
#
# For a report or a page picture of any store, a campaign store under results/ included
# (docs/results/ pages; e.g. results/pt2.11-cu130-4x-h200/dlbench.db.gz). Seconds to a minute
# (matplotlib draws every chart). Writes OUT.html (the report) and OUT.png beside it. The store
# is copied (or decompressed) to a temporary folder first, so a committed store is never opened
# in place. Exits non-zero when the page raised a console error in the browser.
# Needs Chromium (apt-get install chromium) and pip install -e '.[report]'.
set -euo pipefail
usage="usage: $0 STORE.db|STORE.db.gz OUT.png [dlbench report flags, e.g. --tag classic-cnn]"
db=${1:?$usage}; png=${2:?$usage}; shift 2
repo=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONPATH="$repo/src${PYTHONPATH:+:$PYTHONPATH}"
png=$(realpath -m "$png"); html=${png%.png}.html
mkdir -p "$(dirname "$png")"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
case $db in
  *.gz) gzip -dc "$db" > "$tmp/dlbench.db" ;;
  *) cp "$db" "$tmp/dlbench.db" ;;
esac
# from the copy's folder, so the report names the store "dlbench.db", not a temporary path
(cd "$tmp" && python3 -m dlbench report --db dlbench.db -o "$html" "$@")
python3 "$repo/tools/browser.py" "$html" --png "$png"
echo "wrote $html and $png" >&2
