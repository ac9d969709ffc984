#!/usr/bin/env bash
# Measures where the ring allreduce overtakes recursive doubling, the number behind
# WorldOptions::small_allreduce_max_bytes (docs/benchmarks.md).
#
#   bench/crossover.sh [--bench PATH] [--repeats R] [--wait-quiet S] [--out FILE.json]
#                      [--ranks 2,3,4] [--transports shm,tcp] [-- extra korovod-bench flags]
#
# Runs `korovod-bench crossover` once per (repeat, transport, world size), each launch separately
# so that one noisy stretch of a shared machine spoils one repeat of one world, not the whole
# grid; writes every row (plus "rep") to FILE.json and prints per world the median over repeats
# of both algorithms at each size, with the crossover: the smallest size from which the ring is
# faster at every larger size.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bench="${here}/../build-bench/bin/korovod-bench"
repeats=3
wait_quiet=0
out="crossover.json"
ranks="2,3,4"
transports="shm,tcp"
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --bench) bench="$2"; shift 2 ;;
    --repeats) repeats="$2"; shift 2 ;;
    --wait-quiet) wait_quiet="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --ranks) ranks="$2"; shift 2 ;;
    --transports) transports="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "crossover.sh: unknown flag '$1' (--help)" >&2; exit 2 ;;
  esac
done
[ -x "$bench" ] || { echo "crossover.sh: no korovod-bench at $bench (--bench)" >&2; exit 2; }

# Busy fraction of the whole machine over 2 s, from /proc/stat (user+nice+system+irq+softirq).
busy_pct() {
  local a b
  read -r -a a < /proc/stat; sleep 2; read -r -a b < /proc/stat
  local busy=$(( (b[1]+b[2]+b[3]+b[6]+b[7]) - (a[1]+a[2]+a[3]+a[6]+a[7]) ))
  local idle=$(( (b[4]+b[5]) - (a[4]+a[5]) ))
  echo $(( 100 * busy / (busy + idle > 0 ? busy + idle : 1) ))
}

# Waits up to $wait_quiet s for a machine below 10% busy: a compile next door moves the
# small-message latencies by 100x, and so the crossover.
wait_for_quiet() {
  [ "$wait_quiet" = 0 ] && return 0
  local start=$SECONDS pct
  while :; do
    pct=$(busy_pct)
    if [ "$pct" -lt 10 ] || [ $((SECONDS - start)) -ge "$wait_quiet" ]; then
      echo "crossover.sh:   machine ${pct}% busy after $((SECONDS - start)) s of waiting" >&2
      return 0
    fi
  done
}

tmp="$(mktemp)"
trap 'rm -f "$tmp"' EXIT
log="${out%.json}.log"  # korovod-bench's stderr: per-launch tables, rank errors
: > "$log"
failed=0
for rep in $(seq 1 "$repeats"); do
  for t in ${transports//,/ }; do
    for n in ${ranks//,/ }; do
      echo "crossover.sh: rep ${rep}/${repeats} ${t} N=${n}" >&2
      wait_for_quiet
      "$bench" crossover --ranks "$n" --transport "$t" "${extra[@]}" 2>>"$log" |
        REP="$rep" /usr/bin/env python3 -c '
import json, os, sys
for line in sys.stdin:
    if line.startswith("{"):
        row = json.loads(line)
        row["rep"] = int(os.environ["REP"])
        print(json.dumps(row))' >> "$tmp" ||
        { echo "crossover.sh: korovod-bench failed for ${t} N=${n}, see $log" >&2; failed=1; }
    done
  done
done

/usr/bin/env python3 - "$tmp" "$out" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
json.dump(rows, open(sys.argv[2], "w"), indent=1)
data = [r for r in rows if r.get("peer") == "korovod" and "error" not in r]
bad = [r for r in rows if "error" in r]
def human(b):
    for unit, m in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= m and b % m == 0:
            return "%d %s" % (b // m, unit)
    return "%d B" % b
summary = []
for t in sorted({r["transport"] for r in data}):
    for n in sorted({r["ranks"] for r in data if r["transport"] == t}):
        sizes = sorted({r["bytes"] for r in data if r["transport"] == t and r["ranks"] == n})
        med = {}
        for b in sizes:
            for a in ("rd", "ring"):
                v = [r["time_us"] for r in data
                     if (r["transport"], r["ranks"], r["bytes"], r["algo"]) == (t, n, b, a)]
                med[b, a] = statistics.median(v) if v else float("nan")
        print("\n**%s N=%d**: median over repeats, µs per float32 allreduce\n" % (t, n))
        print("| size | rd µs | ring µs | ring/rd | faster |\n|---:|---:|---:|---:|---|")
        for b in sizes:
            print("| %s | %.1f | %.1f | %.2f | %s |" % (human(b), med[b, "rd"], med[b, "ring"],
                  med[b, "ring"] / med[b, "rd"], "ring" if med[b, "ring"] < med[b, "rd"] else "rd"))
        ring_from = None
        for b in reversed(sizes):
            if med[b, "ring"] < med[b, "rd"]:
                ring_from = b
            else:
                break
        rd_max = max([b for b in sizes if ring_from is None or b < ring_from], default=0)
        summary.append((t, n, ring_from, rd_max))
print("\n**Crossover** (ring faster at this size and every larger one)\n")
print("| transport | N | ring faster from | recursive doubling up to |\n|---|---:|---:|---:|")
for t, n, ring_from, rd_max in summary:
    print("| %s | %d | %s | %s |" % (t, n, human(ring_from) if ring_from else "never (≤ largest)",
                                    human(rd_max)))
if bad:
    print("\n%d rows failed verification" % len(bad))
    sys.exit(3)
EOF
exit "$failed"
