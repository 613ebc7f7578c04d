#!/usr/bin/env bash
# Packs what a GPU session runs into one relocatable folder, built here on the Debian machine,
# for a GPU machine that has a Python torch (2.11.0+cu130) but none of normlab's Debian
# libraries and no package registry. The folder holds:
#   bin/       normlab, normlab_gpu_tests, normlab-bench-kernels, built for CUDA sm_90
#   lib/       libnormlab and every library they link that is neither torch's (LibTorch, the
#              CUDA runtime and libraries torch's nvidia-* packages provide) nor the C
#              library's; each with RUNPATH $ORIGIN (bin/: $ORIGIN/../lib), so the pack finds
#              its own libraries without LD_LIBRARY_PATH
#   compat/    libstdc++ and libgcc_s of this machine, used only when the GPU machine's own
#              libstdc++ is older than the binaries need
#   data/kjv/  the built-in corpus: tokenizer.model and token shards
#   tools/, configs/  the session and benchmark scripts and the configs they read
#   env.sh     `source env.sh [PYTHON]`: LD_LIBRARY_PATH = (compat/ +) the torch and nvidia
#              library folders of PYTHON's torch (default python3); PATH += bin/
#   MANIFEST   what was packed from which commit, LibTorch, NCCL header, CUDA archs
# It refuses to write a pack over 48 MiB and prints the size.
#
# Usage: tools/gpu/pack.sh OUT [--build DIR] [--data DIR]
#   --build DIR  a build tree to use (default: <repo>/build when it is a CUDA build for sm_90,
#                as tools/build.sh makes on a machine with nvcc; else <repo>/build-pack,
#                configured here with NORMLAB_CUDA=ON and NORMLAB_CUDA_ARCHS=90); only the
#                three targets are built
#   --data DIR   the prepared corpus (default: <repo>/data/kjv, prepared when missing)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
limit_mib=48
out="" build="" data=$root/data/kjv
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    -*) echo "pack: unknown option '$1'" >&2; exit 2 ;;
    *) [ -z "$out" ] || { echo "pack: one output folder only (got '$out' and '$1')" >&2; exit 2; }; out=$1; shift ;;
  esac
done
[ -n "$out" ] || { echo "usage: tools/gpu/pack.sh OUT [--build DIR] [--data DIR]" >&2; exit 2; }
command -v patchelf >/dev/null || { echo "pack: patchelf is missing (run tools/setup.sh)" >&2; exit 1; }
targets=(normlab-cli normlab_gpu_tests normlab-bench-kernels)

# ---- build: the session's targets only, for sm_90 -------------------------------------------
cuda_90() {  # a configured tree with the project's CUDA kernels for sm_90
  local c=$1/CMakeCache.txt
  [ -f "$c" ] && ! grep -q '^NORMLAB_CUDA:STRING=OFF' "$c" && grep -q '^CMAKE_CUDA_COMPILER:[A-Z]*=.' "$c" \
    && grep -Eq '^NORMLAB_CUDA_ARCHS:STRING=(.*;)?90(;.*)?$' "$c"
}
if [ -z "$build" ]; then
  build=$root/build-pack
  cuda_90 "$root/build" && build=$root/build
fi
if [ ! -f "$build/CMakeCache.txt" ]; then
  "$root/tools/setup.sh" >/dev/null
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DNORMLAB_CUDA=ON -DNORMLAB_CUDA_ARCHS=90 \
    > "$build.configure.log" 2>&1 || { tail -30 "$build.configure.log" >&2; echo "pack: configure failed" >&2; exit 1; }
fi
archs=$(sed -n 's/^NORMLAB_CUDA_ARCHS:STRING=//p' "$build/CMakeCache.txt")
nvcc=$(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")
cuda_90 "$build" || { echo "pack: $build is not a CUDA build for sm_90 (NORMLAB_CUDA, archs '$archs', nvcc '$nvcc')" >&2; exit 1; }
cmake --build "$build" --target "${targets[@]}" > "$build/pack-build.log" 2>&1 \
  || { tail -30 "$build/pack-build.log" >&2; echo "pack: build failed ($build/pack-build.log)" >&2; exit 1; }
bins=("$build/tools/normlab" "$build/tests/normlab_gpu_tests" "$build/tools/bench/normlab-bench-kernels")
for b in "${bins[@]}"; do [ -x "$b" ] || { echo "pack: $b was not built" >&2; exit 1; }; done

# ---- the corpus ------------------------------------------------------------------------------
if [ ! -f "$data/tokenizer.model" ] || ! ls "$data"/shards/train-*.bin >/dev/null 2>&1; then
  NORMLAB_BUILD_DIR=$build NORMLAB_DATA_DIR=$data "$root/tools/prepare_corpus.sh" > "$build/pack-corpus.log" 2>&1 \
    || { tail -20 "$build/pack-corpus.log" >&2; echo "pack: preparing the corpus failed" >&2; exit 1; }
fi

# ---- assemble in a temporary folder, then rename: a failed pack leaves no half folder -------
rm -rf "$out.tmp"
mkdir -p "$out.tmp"/{bin,lib,compat,data/kjv,tools/gpu,tools/bench}
tmp=$(cd "$out.tmp" && pwd)
trap 'rm -rf "$tmp"' EXIT
torch_lib=$(sed -n 's/^Torch_DIR:PATH=//p' "$build/CMakeCache.txt")
torch_lib=$(cd "$torch_lib/../../../lib" && pwd)          # site-packages/torch/lib
site=$(cd "$torch_lib/../.." && pwd)                        # site-packages (nvidia/ beside torch/)
for b in "${bins[@]}"; do cp "$b" "$tmp/bin/"; done
# The libraries: ldd's closure of the binaries, less torch's, the C library's and the driver.
declare -A seen=()
while read -r name path; do
  [ -n "$path" ] && [ -f "$path" ] || continue
  real=$(realpath "$path")
  case $real in "$site"/*) continue ;; esac
  case $name in
    linux-vdso*|ld-linux*|libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libutil.so*) continue ;;
    # The driver, and the CUDA libraries torch's wheel brings (nvidia/*/lib): torch's copies.
    libcuda.so*|libcudart.so*|libcublas*|libcudnn*|libnccl*|libnvrtc*|libnvJitLink*|libcupti*|libcufft*|libcurand*|libcusolver*|libcusparse*|libnvshmem*) continue ;;
    libstdc++.so*|libgcc_s.so*) dest=compat ;;
    *) dest=lib ;;
  esac
  [ -n "${seen[$name]:-}" ] && continue
  seen[$name]=1
  cp -L "$path" "$tmp/$dest/$name"
done < <(for b in "${bins[@]}"; do LD_LIBRARY_PATH="" ldd "$b"; done | awk '$2 == "=>" { print $1, $3 }')
for f in "$tmp"/bin/*; do patchelf --set-rpath '$ORIGIN/../lib' "$f"; done
for f in "$tmp"/lib/*; do patchelf --set-rpath '$ORIGIN' "$f"; done
strip --strip-unneeded "$tmp"/bin/* "$tmp"/lib/* "$tmp"/compat/* 2>/dev/null || true
# The newest libstdc++ symbol version the packed code needs: env.sh compares it with the GPU
# machine's libstdc++ and puts compat/ first only when that one is older.
need=$(objdump -T "$tmp"/bin/* "$tmp"/lib/* 2>/dev/null | grep -o 'GLIBCXX_3\.4\.[0-9]*' | sort -t. -k3,3n -u | tail -1)

mkdir -p "$tmp/data/kjv/shards"
cp "$data/tokenizer.model" "$tmp/data/kjv/"
cp "$data"/shards/*.bin "$data"/shards/index.json "$tmp/data/kjv/shards/" 2>/dev/null \
  || cp "$data"/shards/* "$tmp/data/kjv/shards/"
cp "$root"/tools/gpu/*.sh "$tmp/tools/gpu/"
cp "$root"/tools/bench/{gpu_bench.sh,reference_train.py,torch_train.py,matmul_rate.py} "$tmp/tools/bench/"
cp -r "$root/configs" "$tmp/configs"

torch_version=$(sed -n "s/^__version__ = '\(.*\)'/\1/p" "$torch_lib/../version.py")
torch_cuda=$(sed -n "s/^cuda[^=]*= '\(.*\)'/\1/p" "$torch_lib/../version.py")
cat > "$tmp/env.sh" <<EOF
# source env.sh [PYTHON]: run the packed normlab against PYTHON's torch (default python3).
# Checks first that this torch is the one the pack was built against ($torch_version: the same
# ABI) and, where nvidia-smi exists, that the NVIDIA driver is new enough for its CUDA
# (${torch_cuda:-none}); NORMLAB_PACK_NO_CHECK=1 skips both.
_pack=\$(cd "\$(dirname "\${BASH_SOURCE[0]}")" && pwd)
_py=\${1:-\${NORMLAB_PYTHON:-python3}}
_site=\$("\$_py" -c 'import importlib.util, os; print(os.path.dirname(os.path.dirname(importlib.util.find_spec("torch").origin)))') \\
  || { echo "env.sh: \$_py has no torch" >&2; return 1; }
_have=\$(sed -n "s/^__version__ = '\\(.*\\)'/\\1/p" "\$_site/torch/version.py" 2>/dev/null)
if [ -z "\${NORMLAB_PACK_NO_CHECK:-}" ] && [ "\$_have" != "$torch_version" ]; then
  echo "env.sh: \$_py has torch \${_have:-of unknown version} (\$_site/torch), but this pack was built against torch $torch_version: install torch==$torch_version for it, or pack again against this torch (NORMLAB_PACK_NO_CHECK=1 skips this check)" >&2
  return 1
fi
# The oldest driver each CUDA major version runs on (CUDA's minor version compatibility; NVIDIA
# CUDA Toolkit release notes, "CUDA Driver" table): 13.x 580, 12.x 525.60.13, 11.x 450.80.02.
case "${torch_cuda%%.*}" in 13) _min=580 ;; 12) _min=525.60.13 ;; 11) _min=450.80.02 ;; *) _min= ;; esac
if [ -z "\${NORMLAB_PACK_NO_CHECK:-}" ] && [ -n "\$_min" ] && command -v nvidia-smi > /dev/null; then
  _drv=\$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1 | tr -d ' ')
  if [ -n "\$_drv" ] && [ "\$(printf '%s\\n' "\$_min" "\$_drv" | sort -V | head -1)" != "\$_min" ]; then
    echo "env.sh: the NVIDIA driver is \$_drv, but torch $torch_version (CUDA $torch_cuda) needs driver \$_min or newer: update the driver, or use a torch and pack built for an older CUDA (NORMLAB_PACK_NO_CHECK=1 skips this check)" >&2
    return 1
  fi
fi
# The pack's own libraries are found through RUNPATH; LD_LIBRARY_PATH adds torch's, and
# compat/ only when the system libstdc++ lacks the newest symbol version the pack needs ($need).
_libs=\$_site/torch/lib
# awk reads all of ldconfig's output (no early exit): under pipefail a SIGPIPE would fail this.
_sys=\$(/sbin/ldconfig -p 2>/dev/null | awk '/libstdc\+\+\.so\.6 .*x86-64/ && !f { print \$NF; f = 1 }')
if [ -n "$need" ] && { [ -z "\$_sys" ] || ! grep -aq "$need" "\$_sys"; }; then _libs=\$_pack/compat:\$_libs; fi
for _d in "\$_site"/nvidia/*/lib; do [ -d "\$_d" ] && _libs=\$_libs:\$_d; done
export LD_LIBRARY_PATH=\$_libs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
export PATH=\$_pack/bin:\$PATH NORMLAB_PACK=\$_pack NORMLAB_PYTHON=\$(command -v "\$_py")
unset _pack _py _site _libs _sys _d _have _min _drv
EOF

{
  echo "normlab GPU pack"
  echo "commit      $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "built       $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), $(g++ --version | head -1)"
  echo "libtorch    $torch_version (CUDA ${torch_cuda:-none}) from $torch_lib"
  echo "nccl.h      $(sed -n 's/^NORMLAB_NCCL_INCLUDE_DIR:PATH=//p' "$build/CMakeCache.txt")"
  echo "cuda archs  $archs ($("$nvcc" --version | tail -1))"
  echo "libstdc++   needs $need"
  echo "files"
  (cd "$tmp" && find bin lib compat -type f | sort | while read -r f; do echo "  $f $(stat -c %s "$f")"; done)
} > "$tmp/MANIFEST"

size=$(du -sb "$tmp" | cut -f1)
mib=$(awk -v s="$size" 'BEGIN { printf "%.1f", s / 1048576 }')
if [ "$size" -gt $((limit_mib * 1048576)) ]; then
  echo "pack: $mib MiB is over the $limit_mib MiB limit; nothing written to $out" >&2
  exit 1
fi
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
echo "pack: $mib MiB in $out (limit $limit_mib MiB)"
