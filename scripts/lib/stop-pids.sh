# Sourced by the scripts that run nodes as local processes (tls-nodes,
# cluster-nodes, valkey-nodes): stopping them all at once.
# shellcheck shell=bash

# stop_pids PID...: SIGCONT (a frozen node cannot exit) and SIGTERM to every
# one at once, then up to 5 s for all of them together, then SIGKILL.
stop_pids() {
  (($# > 0)) || return 0
  kill -CONT "$@" 2>/dev/null || true
  kill "$@" 2>/dev/null || true
  local pid alive
  for _ in $(seq 50); do
    alive=0
    for pid in "$@"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    ((alive)) || return 0
    sleep 0.1
  done
  kill -9 "$@" 2>/dev/null || true
}
