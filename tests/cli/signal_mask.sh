#!/usr/bin/env bash
# Checks that no thread of the given `normlab train` processes can run a SIGINT or SIGTERM
# handler: the process installs no handler for them, and every thread blocks both except the
# one waiter thread ("normlab-signals"), which takes them with sigwait (while it waits, the
# kernel shows them unblocked in it). A handler on a computing thread corrupted oneDNN's stack
# data (docs/reliability.md). Prints one line; exits 1 naming the process and thread otherwise.
# Usage: signal_mask.sh PID...
set -euo pipefail
want=$(( (1 << 1) | (1 << 14) ))  # SIGINT (2) and SIGTERM (15): bit signal-1
threads=0
for pid in "$@"; do
  caught=$(awk '/^SigCgt:/ {print $2}' "/proc/$pid/status")
  if (( 0x$caught & want )); then
    echo "FAIL: process $pid installs a handler for SIGINT or SIGTERM (SigCgt $caught)"; exit 1
  fi
  n=0 waiters=0
  for task in /proc/"$pid"/task/*; do
    blocked=$(awk '/^SigBlk:/ {print $2}' "$task/status" 2>/dev/null) || continue  # a thread that ended
    [ -n "$blocked" ] || continue
    if [ "$(cat "$task/comm" 2>/dev/null)" = normlab-signals ]; then
      waiters=$((waiters + 1))
      continue
    fi
    if (( (0x$blocked & want) != want )); then
      echo "FAIL: thread $(basename "$task") ($(cat "$task/comm" 2>/dev/null)) of process $pid does not block SIGINT and SIGTERM (SigBlk $blocked)"
      exit 1
    fi
    n=$((n + 1))
  done
  [ "$waiters" -eq 1 ] || { echo "FAIL: process $pid has $waiters signal waiter threads, expected 1"; exit 1; }
  [ "$n" -ge 1 ] || { echo "FAIL: process $pid has no thread besides the signal waiter"; exit 1; }
  threads=$((threads + n))
done
echo "signal mask: all $threads computing threads of $# process(es) block SIGINT and SIGTERM; one waiter each, no handler"
