#!/usr/bin/env bash
# PyTorch's whole distributed test base (every test of DistributedTest._DistTestBase) on gloo and
# on korovod, for each torch, then the tables of docs/torch-backend.md ("PyTorch's own tests"):
#
#   tests/torch_upstream/run_full.sh [OUTDIR]      # default /tmp/torch-upstream; ~20 min a run
#
# Environment: PYTHONS (default: /usr/bin/python3 and .deps/torch-venv/bin/python where present),
# WORLD_SIZE (default 2), BUILD (default <repo>/build: the sidecar, the client extension),
# RUNS (default "gloo korovod korovod-declared": korovod as the suite sees an unknown name, and
# with the name added to the suite's feature sets). Each run writes OUTDIR/<torch>-<run>.json and
# .log; summarize.py prints the tables to OUTDIR/summary.md.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
OUT="${1:-/tmp/torch-upstream}"
BUILD="${BUILD:-$REPO/build}"
WORLD="${WORLD_SIZE:-2}"
RUNS="${RUNS:-gloo korovod korovod-declared}"
DEPS="${KOROVOD_DEPS_DIR:-$REPO/.deps}/torch-upstream"
if [ -z "${PYTHONS:-}" ]; then
  PYTHONS=/usr/bin/python3
  [ -x "$REPO/.deps/torch-venv/bin/python" ] && PYTHONS="$PYTHONS $REPO/.deps/torch-venv/bin/python"
fi
[ -d "$DEPS/expecttest" ] || { echo "run_full.sh: $DEPS/expecttest missing: run scripts/install-deps.sh" >&2; exit 2; }
mkdir -p "$OUT"
export PYTHONPATH="$REPO/python:$BUILD/python:$DEPS"
export PATH="$BUILD/bin:$PATH"
for py in $PYTHONS; do
  tv="$("$py" -c 'import torch; print(torch.__version__.split("+")[0])')"
  for run in $RUNS; do
    backend="${run%-declared}"
    declare_flag=()
    [ "$run" != "$backend" ] && declare_flag=(--declare)
    echo "run_full.sh: torch $tv $run ($py) -> $OUT/$tv-$run.json"
    "$py" "$HERE/upstream_driver.py" --backend "$backend" "${declare_flag[@]}" \
      --world-size "$WORLD" --timeout 120 --out "$OUT/$tv-$run.json" >"$OUT/$tv-$run.log" 2>&1 ||
      echo "run_full.sh: torch $tv $run: the driver exited $? (see $OUT/$tv-$run.log)" >&2
    tail -1 "$OUT/$tv-$run.log"
  done
done
/usr/bin/python3 "$HERE/summarize.py" "$OUT"/*.json >"$OUT/summary.md"
echo "run_full.sh: tables in $OUT/summary.md"
