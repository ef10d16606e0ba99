#!/usr/bin/env bash
# Server CPU per call of two Lua scripts, measured AT ONCE on twin redis-servers.
#
#   benches/twin-scripts.sh A.lua "A's numkeys keys args" B.lua "B's numkeys keys args" [pairs] [calls]
#
# Spawns two private redis-servers on free ports, both pinned to CPU 1 (`TWIN_SERVER_CPU`), loads
# both scripts into both, and runs `redis-benchmark -c 8 -P 16 -n <calls> EVALSHA` of A against
# one server and of B against the other at the same time (pinned to CPU 0, `TWIN_CLIENT_CPU`),
# swapping servers pair by pair. Per pair it prints A's server CPU per call over B's (each
# server's `/proc/<pid>/schedstat` over its calls), then the median. Both servers share one CPU
# and run in the same second, so the host's drift hits both alike: on the shared 2-core
# development machine the same script against itself reads 1.00x +- 0.01.
#
# `__rand_int__` in the arguments is replaced by redis-benchmark with a random number below
# `TWIN_KEYSPACE` (default 10000). `TWIN_SETUP="SET k v;SET k2 v2"` runs those commands on both
# servers first. Only the servers this script spawned are stopped, by pid.
#
# Example (the default fixed-window limiter against the seed `INCR; EXPIRE` script,
# benches/lua/seed_limiter.lua):
#   benches/twin-scripts.sh tests/fixtures/lua/fixed_window.v6.lua "1 rl:__rand_int__ 1000000000 600000 1" \
#       benches/lua/seed_limiter.lua "1 k:__rand_int__ 1000000000 600"
set -euo pipefail

if [ $# -lt 4 ]; then
  sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
a_file=$1 a_args=$2 b_file=$3 b_args=$4
pairs=${5:-9} calls=${6:-300000}
server_cpu=${TWIN_SERVER_CPU:-1} client_cpu=${TWIN_CLIENT_CPU:-0}
keyspace=${TWIN_KEYSPACE:-10000}
dir=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT

free_port() {
  local port
  while :; do
    port=$((20000 + RANDOM % 20000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$port"
      return
    fi
  done
}

ports=()
for side in 0 1; do
  port=$(free_port)
  taskset -c "$server_cpu" redis-server --port "$port" --save '' --appendonly no \
    --daemonize yes --pidfile "$dir/$side.pid" --logfile "$dir/$side.log"
  for _ in $(seq 50); do
    [ -s "$dir/$side.pid" ] && redis-cli -p "$port" PING >/dev/null 2>&1 && break
    sleep 0.1
  done
  pid=$(cat "$dir/$side.pid")
  pids+=("$pid")
  ports+=("$port")
  # Every thread of the server (its background threads too).
  taskset -a -p -c "$server_cpu" "$pid" >/dev/null
done

for port in "${ports[@]}"; do
  sha_a=$(redis-cli -p "$port" SCRIPT LOAD "$(cat "$a_file")")
  sha_b=$(redis-cli -p "$port" SCRIPT LOAD "$(cat "$b_file")")
  if [ -n "${TWIN_SETUP:-}" ]; then
    tr ';' '\n' <<<"$TWIN_SETUP" | redis-cli -p "$port" >/dev/null
  fi
done

cpu_ns() { awk '{print $1}' "/proc/$1/schedstat"; }

ratios=()
for pair in $(seq "$pairs"); do
  a=$((pair % 2)) b=$(((pair + 1) % 2))
  a0=$(cpu_ns "${pids[$a]}") b0=$(cpu_ns "${pids[$b]}")
  # Word splitting of the argument strings is intended: numkeys, keys, args.
  # shellcheck disable=SC2086
  taskset -c "$client_cpu" redis-benchmark -p "${ports[$a]}" -c 8 -P 16 -n "$calls" \
    -r "$keyspace" -q EVALSHA "$sha_a" $a_args >"$dir/a.out" 2>&1 &
  # shellcheck disable=SC2086
  taskset -c "$client_cpu" redis-benchmark -p "${ports[$b]}" -c 8 -P 16 -n "$calls" \
    -r "$keyspace" -q EVALSHA "$sha_b" $b_args >"$dir/b.out" 2>&1 &
  wait
  if grep -qi "err" "$dir/a.out" "$dir/b.out"; then
    echo "a script answered an error:" >&2
    cat "$dir/a.out" "$dir/b.out" >&2
    exit 1
  fi
  a1=$(cpu_ns "${pids[$a]}") b1=$(cpu_ns "${pids[$b]}")
  ratios+=("$(awk -v a=$((a1 - a0)) -v b=$((b1 - b0)) 'BEGIN { printf "%.3f", a / b }')")
done
median=$(printf '%s\n' "${ratios[@]}" | sort -n | sed -n "$(((pairs + 1) / 2))p")
echo "A/B server CPU per call, per pair: ${ratios[*]}"
echo "median: $median"
