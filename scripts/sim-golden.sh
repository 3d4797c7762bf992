#!/usr/bin/env bash
# sim-golden.sh: the decisions of every strategy, as `tokenmesh sim --json`
# prints them, on both shared traces and under the example fault scenarios,
# written into one directory per build so that a refactoring can be checked
# byte-identical against the build before it.
#
# Usage:
#   scripts/sim-golden.sh BINARY OUTDIR        # write OUTDIR/*.json
#   scripts/sim-golden.sh --compare BASE NEW   # run both binaries, diff
#
# BINARY is a built tokenmesh (go build -o /tmp/tm-base ./cmd/tokenmesh on
# the commit before the change). The traces are read from ../shared beside
# the repository (never copied in). Takes about 2-3 minutes per build on 2
# cores. Exit status 1 when --compare finds a difference; the differing
# files are named.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
traces=${TRACES:-$here/../shared/data/traces}
all=central,local,static,owner,gcounter,tbqueue,gdrl,adaptive,lease,regionlease,quota,fixedwindow

run() {
	local bin=$1 out=$2
	mkdir -p "$out"
	for tr in wrccdc-2018-dns zanbil-2019-http; do
		"$bin" sim --trace "$traces/$tr.csv.gz" --strategies "$all" --json >"$out/$tr.json" 2>/dev/null
		"$bin" sim --trace "$traces/$tr.csv.gz" --strategies "$all" --loss 0.05 --latency exp:2ms --seed 7 --json >"$out/$tr-loss.json" 2>/dev/null
	done
	for sc in crash-hot-owner crash-restart-3nodes loss-5pct partition-3nodes partition; do
		local nodes=10
		case $sc in *3nodes*) nodes=3 ;; esac
		"$bin" sim --trace "$traces/wrccdc-2018-dns.csv.gz" --nodes $nodes --strategies "$all" \
			--scenario "$here/examples/scenarios/$sc.yaml" --json >"$out/scenario-$sc.json" 2>/dev/null
	done
	"$bin" sim --workload tenants:users=20,rate=2000,duration=20s --rate 1000 --burst 1000 --nodes 30 \
		--strategies central,owner,lease,quota --proxies 20 --json >"$out/proxies.json" 2>/dev/null
	"$bin" sim --workload tenants:users=20,rate=2000,duration=20s --rate 1000 --burst 1000 \
		--regions eu:5,us:5,ap:5 --wan-latency exp:60ms --strategies central,owner,lease,regionlease --json \
		>"$out/regions.json" 2>/dev/null
}

if [[ ${1:-} == --compare ]]; then
	base=$2 new=$3
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	run "$base" "$tmp/base"
	run "$new" "$tmp/new"
	status=0
	for f in "$tmp"/base/*.json; do
		n=$(basename "$f")
		if ! cmp -s "$f" "$tmp/new/$n"; then
			echo "differs: $n"
			status=1
		fi
	done
	[[ $status == 0 ]] && echo "identical: $(ls "$tmp/base" | wc -l) outputs"
	exit $status
fi

if [[ $# -ne 2 ]]; then
	echo "usage: $0 BINARY OUTDIR | --compare BASE_BINARY NEW_BINARY" >&2
	exit 2
fi
run "$1" "$2"
