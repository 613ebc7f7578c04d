#!/usr/bin/env bash
# Sends a signal with a handler to a `normlab train` process about once a millisecond and says
# whether it survived: the check that a computing thread may take a signal handler (the answer
# for the LibTorch build normlab uses: no; docs/reliability.md, "Signals and oneDNN"). SIGUSR1
# gets a handler that only counts, installed by a preloaded library; SIGINT and SIGTERM, which
# normlab takes on a waiter thread, are not used.
# Usage: tools/signal_storm.sh [--altstack] [RUNS] [STEPS]
#   --altstack  the handler runs on an alternate signal stack (sigaltstack) instead of the
#               stack of the thread it interrupts
# Env:   NORMLAB_BUILD_DIR (default: <repo>/build); the built-in corpus of the tests
#        (build/tests/kjv, made by `ctest -R kjv_corpus`)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${NORMLAB_BUILD_DIR:-$root/build}
altstack=0
[ "${1:-}" != --altstack ] || { altstack=1; shift; }
runs=${1:-5} steps=${2:-200}
normlab=$build/tools/normlab kjv=$build/tests/kjv
[ -x "$normlab" ] && [ -f "$kjv/shards/index.json" ] \
  || { echo "signal_storm: needs $normlab and the corpus in $kjv (ctest -R kjv_corpus)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/storm.c" <<'C'
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
static volatile sig_atomic_t count;
static void on_usr1(int sig) { int e = errno; (void)sig; ++count; errno = e; }
__attribute__((constructor)) static void install(void) {
  struct sigaction a = {0};
  a.sa_handler = on_usr1;
  a.sa_flags = SA_RESTART;
  if (getenv("STORM_ALTSTACK")) {
    stack_t s = {.ss_sp = malloc(1 << 20), .ss_size = 1 << 20};
    sigaltstack(&s, NULL);
    a.sa_flags |= SA_ONSTACK;
  }
  sigaction(SIGUSR1, &a, NULL);
}
__attribute__((destructor)) static void report(void) { fprintf(stderr, "storm: %ld signals taken\n", (long)count); }
C
cc -shared -fPIC -O1 "$work/storm.c" -o "$work/storm.so"
crashed=0
for i in $(seq 1 "$runs"); do
  # One thread computes (OMP_NUM_THREADS=1): the main thread, which set up the alternate stack.
  vars=(OMP_NUM_THREADS=1 LD_PRELOAD="$work/storm.so")
  [ "$altstack" = 0 ] || vars+=(STORM_ALTSTACK=1)
  env "${vars[@]}" "$normlab" train --config "$root/configs/tiny/lm.yaml" --set "data.train=$kjv/shards" \
    --set "data.tokenizer=$kjv/tokenizer.model" --set train.global_batch=12 --set train.micro_batch=2 \
    --set eval.every=0 --set logging.every=1000 --set checkpoint.every=0 --set checkpoint.at_end=false \
    --set train.steps="$steps" --out "$work/run$i" > "$work/run$i.out" 2>&1 &
  job=$!
  # The first signal only once normlab runs with the handler in place (SigCgt bit 9: SIGUSR1).
  exe=$(readlink -f "$normlab")
  until [ "$(readlink "/proc/$job/exe" 2>/dev/null)" = "$exe" ] \
      && (( 0x$(awk '/^SigCgt:/ {print $2}' "/proc/$job/status" 2>/dev/null || echo 0) & (1 << 9) )); do
    kill -0 "$job" 2>/dev/null || break
    sleep 0.01
  done
  while kill -0 "$job" 2>/dev/null; do kill -USR1 "$job" 2>/dev/null || true; sleep 0.001; done
  rc=0
  wait "$job" 2>/dev/null || rc=$?
  taken=$(grep -o 'storm: [0-9]* signals' "$work/run$i.out" || echo "storm: ? signals")
  if [ "$rc" -eq 138 ]; then  # 128 + SIGUSR1: its default action, before the handler was in place
    echo "run $i: ended by SIGUSR1 before its handler was installed; not counted"
    runs=$((runs - 1))
  elif [ "$rc" -ne 0 ]; then
    crashed=$((crashed + 1))
    echo "run $i: exit $rc after $(wc -l < "$work/run$i/metrics.jsonl" 2>/dev/null || echo 0) steps: $(grep -m1 -E 'corrupted|double free|free\(\)|Segmentation|error' "$work/run$i.out" || echo '?')"
  else
    echo "run $i: completed $steps steps; $taken taken"
  fi
done
echo "signal_storm: $crashed of $runs runs crashed (handler on $([ $altstack = 1 ] && echo 'an alternate stack' || echo "the interrupted thread's stack"))"
