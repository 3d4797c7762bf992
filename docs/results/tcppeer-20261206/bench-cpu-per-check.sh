#!/bin/bash
# usage: bench-cpu-per-check.sh grpc|tcp OUTPREFIX [extra bench args] (Linux, curl, python3)
# One `bench --spawn 3 --strategy owner` run; during the load it samples,
# at the same instants, the spawned nodes' utime+stime (/proc/PID/stat)
# and their tokenmesh_decisions_total (/metrics), 1 s after the load
# starts and 4 s later, and
# prints the server CPU per check of that window.
set -u
carrier=$1; out=$2; shift 2
bin=${TOKENMESH:-./tokenmesh} # go build -o tokenmesh ./cmd/tokenmesh
$bin bench --spawn 3 --strategy owner --duration 8s --warmup 1s --concurrency 32 --keys 10000 \
  --limit-rate 1000000000/s --limit-burst 1000000000 --json --spawn-peer-transport "$carrier" "$@" >"$out.json" 2>"$out.err" &
bp=$!
sample() { # prints: cpu_ticks decisions syscr syscw
  local cpu=0 dec=0 r=0 w=0 c
  for k in $kids; do
    c=$(awk '{print $14+$15}' /proc/$k/stat 2>/dev/null); cpu=$((cpu + ${c:--999999999}))
    c=$(awk '/^syscr/ {print $2}' /proc/$k/io 2>/dev/null); r=$((r + ${c:-0}))
    c=$(awk '/^syscw/ {print $2}' /proc/$k/io 2>/dev/null); w=$((w + ${c:-0}))
  done
  for a in $apis; do
    d=""
    for try in 1 2 3 4 5; do
      d=$(curl -sf --max-time 5 "http://$a/metrics" | awk '/^tokenmesh_decisions_total/ {s+=$2; n++} END {if (n) printf "%d", s}')
      [ -n "$d" ] && break
    done
    [ -z "$d" ] && d=-999999999
    dec=$((dec + d))
  done
  echo "$cpu $dec $r $w"
}
kids=""; apis=""
for i in $(seq 1 300); do # wait for three nodes and their addr files (60 s at most)
  kids=$(pgrep -P $bp -f serve | tr '\n' ' ')
  apis=""
  for k in $kids; do
    f=$(tr '\0' '\n' </proc/$k/cmdline | grep -A1 -- --addr-file | tail -1)
    [ -s "$f" ] && apis="$apis $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["api"])' "$f")"
  done
  [ $(echo $apis | wc -w) -eq 3 ] && break
  sleep 0.2
done
for i in $(seq 1 300); do # wait for the load (decisions moving), 60 s at most
  s=$(sample); d=$(echo $s | cut -d' ' -f2); [ "$d" -gt 1000 ] && break; sleep 0.2
done
sleep 1
s1=$(sample); t1=$(date +%s.%N)
sleep 4
s2=$(sample); t2=$(date +%s.%N)
wait $bp
python3 - "$s1" "$s2" "$t1" "$t2" "$out" "$carrier" <<'PY'
import json,sys
c1,d1,r1,w1=map(int,sys.argv[1].split()); c2,d2,r2,w2=map(int,sys.argv[2].split()); t1,t2=float(sys.argv[3]),float(sys.argv[4])
out,carrier=sys.argv[5],sys.argv[6]
j=json.load(open(out+".json"))
cpu=(c2-c1)/100.0; dec=d2-d1
print(f"{carrier:4} checks/s {j['checks_per_s']:8.0f} p50 {j['latency_ms']['p50']:6.2f} ms p99 {j['latency_ms']['p99']:7.2f} ms | window {t2-t1:.2f}s: {dec} checks, node CPU {cpu:.2f}s = {cpu/(t2-t1):.2f} cores, {1e6*cpu/dec:.1f} us/check, reads {(r2-r1)/dec:.2f} writes {(w2-w1)/dec:.2f} per check | client {j['client_cpu_cores']:.2f} cores")
PY
