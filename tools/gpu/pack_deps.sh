#!/usr/bin/env bash
# Packs normlab's non-torch build dependencies (headers, libraries and CMake/pkg-config files
# of the Debian packages tools/setup.sh installs) into one relocatable prefix, for a machine
# that has a Python torch but none of these libraries and no package registry (a GPU node, a
# container). About 10 MB. Run it on a Debian 12 machine where tools/setup.sh has run.
# Usage: tools/gpu/pack_deps.sh [OUT_DIR]   (default: <repo>/deps; OUT_DIR/usr is the prefix)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${1:-$root/deps}
packages=(
  libyaml-cpp-dev libyaml-cpp0.7 libspdlog-dev libspdlog1.10 libfmt-dev libfmt9
  libsentencepiece-dev libsentencepiece0 libcli11-dev nlohmann-json3-dev
  libpcre2-dev libpcre2-8-0 libutf8proc-dev libutf8proc2
  libgtest-dev libgmock-dev zlib1g-dev
)
rm -rf "$out"
mkdir -p "$out"
for p in "${packages[@]}"; do
  dpkg-query -W "$p" >/dev/null 2>&1 || { echo "pack_deps: package $p is not installed (run tools/setup.sh)" >&2; exit 1; }
  # Files and symlinks of the package, under /usr, copied with the same layout below $out.
  dpkg -L "$p" | while read -r f; do
    case $f in /usr/share/doc/*|/usr/share/man/*|/usr/share/lintian/*) continue ;; esac
    if [ -f "$f" ] || [ -L "$f" ]; then
      mkdir -p "$out$(dirname "$f")"
      cp -P "$f" "$out$f"
    fi
  done
done
# zlib's runtime library lives in /lib on Debian's merged /usr; ship the real file too.
cp -L /usr/lib/x86_64-linux-gnu/libz.so.1 "$out/usr/lib/x86_64-linux-gnu/" 2>/dev/null || true
echo "pack_deps: $(du -sh "$out" | cut -f1) in $out (prefix $out/usr)"
