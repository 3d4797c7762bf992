#!/usr/bin/env bash
# scrape-p99.sh: does a /metrics scrape every 0.5 s move the check p99 of a
# node holding 1M keys? (issue 28: "a 0.5 s scrape of 1M keys moves check
# p99 by less than 2 ms"; docs/PERFORMANCE.md "Checks while scraping").
#
# One `tokenmesh serve` (loopback, port 0) with three rules: own (owner,
# 1/h burst 5) and gc (gcounter, 1/h burst 5), each filled with KEYS keys
# through POST /v1/check, and probe (gcounter, 10^6/s) that the bench
# drives. Then PAIRS pairs of A (bench alone) and B (bench with a scrape
# every 0.5 s beside it), printing p50/p90/p99 of each and the scrapes'
# times. Every loop is bounded; only the node started here is stopped.
#
# Usage: scripts/scrape-p99.sh [BIN] (default bin/tokenmesh)
#   KEYS=1000000 PAIRS=4 DURATION=10s RATE=2000 CONC=8
set -euo pipefail
BIN=${1:-bin/tokenmesh}
KEYS=${KEYS:-1000000}
PAIRS=${PAIRS:-4}
DURATION=${DURATION:-10s}
RATE=${RATE:-2000}
CONC=${CONC:-8}
[ -x "$BIN" ] || { echo "scrape-p99: no executable $BIN (make build)" >&2; exit 2; }

dir=$(mktemp -d)
pid=
cleanup() {
	if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
	rm -rf "$dir"
}
trap cleanup EXIT

cat >"$dir/node.yaml" <<'EOF'
node:
  name: n1
  api_addr: 127.0.0.1:0
  grpc_addr: 127.0.0.1:0
rules:
  - name: own
    key: "{key}"
    rate: 1/h
    burst: 5
    strategy: owner
  - name: gc
    key: "{key}"
    rate: 1/h
    burst: 5
    strategy: gcounter
  - name: probe
    key: "{key}"
    rate: 1000000/s
    burst: 1000000
    strategy: gcounter
EOF
"$BIN" serve --config "$dir/node.yaml" --addr-file "$dir/addr.json" 2>"$dir/node.log" &
pid=$!
for _ in $(seq 100); do [ -s "$dir/addr.json" ] && break; sleep 0.1; done
[ -s "$dir/addr.json" ] || { echo "scrape-p99: the node did not start:" >&2; cat "$dir/node.log" >&2; exit 1; }
api=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["api"])' "$dir/addr.json")
grpc=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["grpc"])' "$dir/addr.json")
echo "node pid $pid, api $api, grpc $grpc; filling $KEYS keys in own and gc"

python3 - "$api" "$KEYS" <<'EOF'
import json, sys, time, urllib.request
api, keys = sys.argv[1], int(sys.argv[2])
t0 = time.time()
for rule in ("own", "gc"):
    for start in range(0, keys, 1000):
        body = json.dumps({"checks": [{"rule": rule, "key": "key-%d" % i, "hits": 1}
                                      for i in range(start, min(start + 1000, keys))]}).encode()
        req = urllib.request.Request("http://%s/v1/check" % api, data=body,
                                     headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=30).read()
        if start % 100000 == 0:
            print("  %s: %d keys, %.0f s" % (rule, start, time.time() - t0), flush=True)
print("filled in %.0f s" % (time.time() - t0))
EOF
rss=$(awk '/VmRSS/ {print $2/1024 " MiB"}' /proc/$pid/status)
echo "node RSS after the fill: $rss"

bench() {
	"$BIN" bench --target "$grpc" --rule probe --keys 1000 --concurrency "$CONC" \
		--rate "$RATE" --duration "$DURATION" --warmup 1s 2>&1 |
		grep -A1 'p50 ms' | tr -s ' '
}
scrapes() {
	local n=$1
	for _ in $(seq "$n"); do
		curl -s -o /dev/null -w '%{time_total}\n' "http://$api/metrics"
		sleep 0.5
	done | sort -n | awk '{a[NR]=$1} END {printf "scrapes %d, median %.1f ms, max %.1f ms\n", NR, 1000*a[int((NR+1)/2)], 1000*a[NR]}'
}
secs=${DURATION%s}
for p in $(seq "$PAIRS"); do
	echo "pair $p A (alone):"
	bench
	echo "pair $p B (a scrape every 0.5 s):"
	scrapes $((2 * (secs + 2))) >"$dir/scr" &
	spid=$!
	bench
	wait "$spid"
	cat "$dir/scr"
done
