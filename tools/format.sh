#!/usr/bin/env bash
# Formats every C++ file of the repository with clang-format and the repository's .clang-format
# (Google style, 100 columns). With --check, changes nothing: lists the files that are not
# formatted and exits 1 (CTest `format`). The style is pinned to Debian 12's clang-format 14,
# which tools/setup.sh installs; another version may format some constructs differently.
# Usage: tools/format.sh [--check]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
command -v clang-format >/dev/null || { echo "format: clang-format is missing (run tools/setup.sh)" >&2; exit 1; }
mapfile -t files < <(git ls-files -co --exclude-standard '*.cpp' '*.h' '*.hpp' '*.cu' '*.cuh' | grep -v '^tests/fuzz/corpus/' | sort -u)
existing=()
for f in "${files[@]}"; do [ -f "$f" ] && existing+=("$f"); done
if [ "${1:-}" = "--check" ]; then
  bad=()
  for f in "${existing[@]}"; do
    clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
  done
  if ((${#bad[@]})); then
    printf 'not formatted: %s\n' "${bad[@]}"
    echo "format: ${#bad[@]} of ${#existing[@]} files differ from $(clang-format --version | sed 's/.*version //'); run tools/format.sh"
    exit 1
  fi
  echo "format: PASS (${#existing[@]} files, $(clang-format --version | sed 's/.*version //'))"
else
  clang-format -i "${existing[@]}"
  echo "format: ${#existing[@]} files formatted"
fi
