#!/usr/bin/env bash
# Mutation testing of the numerics: applies each mutation of tools/mutate/mutations.txt in turn
# (a small fault in a scheme's update, a norm, RoPE, attention, SwiGLU, init, the optimizer,
# the schedule, clipping, the loss, FSDP's shard arithmetic), rebuilds incrementally, runs the
# unit label, and restores the file. A mutation is killed when a test fails, survives when all
# pass; one that does not compile is listed apart and left out of the score. Prints the kill
# rate and writes BUILD/mutate/report.md (one row per mutation, with the tests that failed).
# The survivors and why they survive: docs/testing.md.
# Usage: tools/mutate.sh [--check] [--only NAME[,NAME...]]
#   --check  only check that every mutation still applies (its text occurs exactly once); the
#            unit test `mutations_apply` runs this so that the list follows the code
# Env:   NORMLAB_BUILD_DIR (default build/, configured by tools/build.sh), NORMLAB_JOBS
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${NORMLAB_BUILD_DIR:-$root/build}
list=$root/tools/mutate/mutations.txt
check=0 only=
while [ $# -gt 0 ]; do
  case $1 in
    --check) check=1; shift ;;
    --only) only=${2:?--only needs a list of names}; shift 2 ;;
    *) echo "mutate: unknown argument '$1' (--check, --only NAMES)" >&2; exit 2 ;;
  esac
done
cd "$root"

# mutation NAME apply|restore|list|check: the small Python that reads the list and edits files.
mutation() {
  python3 - "$list" "$@" <<'PY'
import os, shutil, sys
path, action = sys.argv[1], sys.argv[2]
name = sys.argv[3] if len(sys.argv) > 3 else None
muts, cur = [], None
for n, line in enumerate(open(path), 1):
    line = line.rstrip("\n")
    if line.startswith("## "):
        head = line[3:]
        cur = {"name": head.split(":")[0].strip(), "what": head.split(":", 1)[-1].strip(), "line": n}
        muts.append(cur)
    elif cur is not None:
        for key in ("file", "old", "new"):
            if line.startswith(key + ": "):
                cur[key] = line[len(key) + 2:]
bad = [m for m in muts if not all(k in m for k in ("file", "old", "new"))]
if bad:
    sys.exit(f"{path}:{bad[0]['line']}: mutation {bad[0]['name']} lacks file:, old: or new:")
names = [m["name"] for m in muts]
if len(set(names)) != len(names):
    sys.exit(f"{path}: mutation names repeat")
if action == "list":
    for m in muts:
        print(m["name"], m["file"], sep="\t")
    sys.exit(0)
if action == "check":
    stale = []
    for m in muts:
        text = open(m["file"]).read() if os.path.exists(m["file"]) else ""
        if text.count(m["old"]) != 1:
            stale.append(f"{path}:{m['line']}: {m['name']}: the text occurs "
                         f"{text.count(m['old'])} times in {m['file']} (must be once)")
    for s in stale:
        print(s)
    print(f"{len(muts)} mutations, {len(stale)} stale")
    sys.exit(1 if stale else 0)
m = next((m for m in muts if m["name"] == name), None)
if m is None:
    sys.exit(f"{path}: no mutation named {name}")
backup = m["file"] + ".mutate-orig"
if action == "apply":
    text = open(m["file"]).read()
    if text.count(m["old"]) != 1:
        sys.exit(f"{m['name']}: its text occurs {text.count(m['old'])} times in {m['file']}")
    shutil.copy2(m["file"], backup)
    open(m["file"], "w").write(text.replace(m["old"], m["new"]))
    print(m["file"], m["what"], sep="\t")
elif action == "restore" and os.path.exists(backup):
    os.replace(backup, m["file"])
    # The backup kept the original's time, older than the mutant's objects: without a new time
    # the next build would keep the mutant compiled in.
    os.utime(m["file"])
PY
}

if [ $check = 1 ]; then mutation check; exit; fi
mutation check > /dev/null || { mutation check; exit 1; }
[ -f "$build/build.ninja" ] || { echo "mutate: $build is not configured; run tools/build.sh first" >&2; exit 1; }
mapfile -t names < <(mutation list | cut -f1)
if [ -n "$only" ]; then IFS=, read -r -a names <<< "$only"; fi
targets=(--target normlab_unit_tests --target normlab-cli --target normlab_fuzz_replay)
out=$build/mutate && mkdir -p "$out"
current=
restore() { [ -z "$current" ] || mutation restore "$current"; current=; }
trap 'restore; cmake --build "$build" "${targets[@]}" > /dev/null 2>&1 || true' EXIT
trap 'exit 130' INT TERM

echo "mutate: a clean build first"
cmake --build "$build" "${targets[@]}" > "$out/build.log" 2>&1 || { cat "$out/build.log"; exit 1; }
ctest --test-dir "$build" -L unit -j2 > "$out/baseline.log" 2>&1 \
  || { tail -20 "$out/baseline.log"; echo "mutate: the unit label fails without mutations" >&2; exit 1; }

killed=0 survived=0 stillborn=0 t_start=$SECONDS
rows=()
survivors=()
for name in "${names[@]}"; do
  t0=$SECONDS
  current=$name
  what=$(mutation apply "$name" | cut -f2)
  if ! cmake --build "$build" "${targets[@]}" ${NORMLAB_JOBS:+-j "$NORMLAB_JOBS"} > "$out/$name.build.log" 2>&1; then
    result="does not compile" failed=
    stillborn=$((stillborn + 1))
  # Without mutations_apply, which fails whenever a mutation is in place (its text is gone):
  # it would kill every mutation and, with --stop-on-failure, stop the tests that matter. And
  # without format: a mutated line that clang-format would wrap differently says nothing about
  # the numerics, yet would count as a kill.
  elif ctest --test-dir "$build" -L unit -E '^(mutations_apply|format)$' -j2 --stop-on-failure --timeout 300 \
         > "$out/$name.test.log" 2>&1; then
    result=SURVIVED failed=
    survived=$((survived + 1)); survivors+=("$name")
  else
    failed=$(sed -n '/The following tests FAILED/,$p' "$out/$name.test.log" | grep -E '^\s+[0-9]+ - ' \
             | sed -E 's/^\s+[0-9]+ - //; s/ \(.*//' | paste -sd, - || true)
    result=killed
    killed=$((killed + 1))
  fi
  restore
  printf 'mutate: %-28s %-16s %4d s  %s\n' "$name" "$result" $((SECONDS - t0)) "$failed"
  rows+=("| \`$name\` | $what | $result | ${failed:-} | $((SECONDS - t0)) |")
done
total=$((killed + survived))
rate=$(python3 -c "print(f'{100 * $killed / max($total, 1):.1f}')")
{
  echo "# Mutation score"
  echo
  echo "$killed of $total mutations killed ($rate %), $stillborn that do not compile left out;"
  echo "$((SECONDS - t_start)) s on $(nproc) cores ($(date -u +%Y-%m-%d))."
  echo
  echo "| mutation | fault | result | failed tests | seconds |"
  echo "|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
} > "$out/report.md"
echo "mutate: $killed of $total killed ($rate %), $stillborn do not compile; $((SECONDS - t_start)) s; report $out/report.md"
[ ${#survivors[@]} = 0 ] || echo "mutate: survivors: ${survivors[*]}"
