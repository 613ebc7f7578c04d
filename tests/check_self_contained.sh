#!/usr/bin/env bash
# The repository stands on its own: no file points outside it. Fails on any text file of the
# working tree (tracked, or new and not ignored) that names PAPER.md or DESIGN.md (cite
# docs/paper.md instead), a path into a sibling or the machine (`../shared`, `/work/`), or an
# issue or pull-request number, or the word "lent" (how a GPU reached the developers is not the
# product's business: write "not yet measured on a GPU"). Skipped: binary files, this script (it holds the patterns),
# tests/data/ and tests/fuzz/corpus/ (data, not prose; fuzz inputs may contain any path).
# Usage: tests/check_self_contained.sh REPO_ROOT
# Prints FILE:LINE: TEXT for each hit and exits 1, else prints "self-contained: PASS".
set -euo pipefail

root=${1:?usage: check_self_contained.sh REPO_ROOT}
cd "$root"
self=tests/check_self_contained.sh

# Exact strings, case-sensitive (docs/paper.md itself must not match "PAPER.md").
fixed=(-e 'PAPER.md' -e 'DESIGN.md' -e '../shared' -e '/work/')
# Issue and pull-request references, case-insensitive: "issue 9", "Issues #12", "PR #3",
# ".../issues/4", ".../pull/5", and a bare "#7" standing alone after a space or "(".
refs='\blent\b|\bissues? #?[0-9]+\b|\bPR #[0-9]+\b|/(issues|pull)/[0-9]+\b|(^|[[:space:](])#[0-9]+([[:space:]).,:;]|$)'

files=()
while IFS= read -r -d '' f; do
  case $f in
    "$self" | tests/data/* | tests/fuzz/corpus/*) continue ;;
  esac
  [ -f "$f" ] && files+=("$f")
done < <(git ls-files -z --cached --others --exclude-standard | sort -zu)

hits=$(
  if [ ${#files[@]} -gt 0 ]; then
    printf '%s\0' "${files[@]}" | xargs -0 grep -nHI -F "${fixed[@]}" -- || true
    printf '%s\0' "${files[@]}" | xargs -0 grep -nHIi -E "$refs" -- || true
  fi | sort -t: -k1,1 -k2,2n -u
)

if [ -n "$hits" ]; then
  printf '%s\n' "$hits"
  echo "self-contained: FAIL ($(printf '%s\n' "$hits" | wc -l) line(s) point outside the repository;" \
       "cite docs/paper.md or say it in plain words)"
  exit 1
fi
echo "self-contained: PASS"
