#!/usr/bin/env bash
# The GPU pack (tools/gpu/pack.sh) works away from this build: packs the build tree, copies the
# pack into an empty folder and deletes the original, then, from the copy and against the
# Python torch only (env.sh): env.sh refuses a torch other than the pack's (a fake python) and
# a driver too old for its CUDA (a fake nvidia-smi); every library the binaries load resolves
# inside the pack, inside torch's site-packages or to the C/C++ runtime; `normlab version` runs; one CPU training step
# of the tiny config on the packed corpus completes; the GPU test binary and the kernel
# benchmark start. Leaves the copy in WORK_DIR/unpacked/gpu-pack for gpu_session_dry_run.
# Usage: pack.sh NORMLAB SOURCE_DIR CORPUS_DIR PYTHON WORK_DIR
set -euo pipefail
normlab=$1 src=$2 corpus=$3 python=$4 work=$5
build=$(cd "$(dirname "$normlab")/.." && pwd)
rm -rf "$work"
mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }

"$src/tools/gpu/pack.sh" "$work/pack" --build "$build" --data "$corpus" | tee "$work/pack.out"
grep -q "^pack: [0-9.]* MiB in $work/pack (limit 48 MiB)" "$work/pack.out" || fail "pack.sh printed no size line"
for f in bin/normlab bin/normlab_gpu_tests bin/normlab-bench-kernels env.sh MANIFEST data/kjv/tokenizer.model \
         tools/gpu/session.sh tools/bench/gpu_bench.sh configs/tiny/lm.yaml; do
  [ -e "$work/pack/$f" ] || fail "the pack has no $f"
done
ls "$work/pack"/lib/libnormlab.so* >/dev/null || fail "the pack has no libnormlab"
ls "$work/pack"/data/kjv/shards/train-*.bin >/dev/null || fail "the pack has no train shards"
[ ! -e "$work/pack.tmp" ] || fail "pack.sh left its temporary folder"

# "Unpack" into an empty folder; nothing may point back at the original or the build tree.
mkdir -p "$work/unpacked"
cp -r "$work/pack" "$work/unpacked/gpu-pack"
rm -rf "$work/pack"
pack=$work/unpacked/gpu-pack
for f in "$pack"/bin/* "$pack"/lib/*; do
  rp=$(patchelf --print-rpath "$f")
  want='$ORIGIN'; case $f in */bin/*) want='$ORIGIN/../lib' ;; esac
  [ "$rp" = "$want" ] || fail "$f has RUNPATH '$rp', not $want"
done

# env.sh refuses, before anything runs, a torch other than the pack's (a fake python whose
# torch is 2.10.0) and, for a CUDA 13 pack, a driver older than 580 (a fake nvidia-smi).
fake=$work/fake
mkdir -p "$fake/site/torch" "$fake/bin"
echo "__version__ = '2.10.0+cu128'" > "$fake/site/torch/version.py"
printf '#!/bin/sh\necho %s\n' "$fake/site" > "$fake/python"
printf '#!/bin/sh\necho 575.57.08\n' > "$fake/bin/nvidia-smi"
chmod +x "$fake/python" "$fake/bin/nvidia-smi"
msg=$( (source "$pack/env.sh" "$fake/python") 2>&1 ) && fail "env.sh accepted torch 2.10.0"
echo "$msg" | grep -q "^env.sh: $fake/python has torch 2.10.0+cu128 ($fake/site/torch), but this pack was built against torch " \
  || fail "env.sh's torch message: $msg"
echo "refused: $msg"
if grep -q "(CUDA 13\." "$pack/MANIFEST"; then
  msg=$( (PATH=$fake/bin:$PATH; source "$pack/env.sh" "$python") 2>&1 ) && fail "env.sh accepted driver 575"
  echo "$msg" | grep -q "^env.sh: the NVIDIA driver is 575.57.08, but torch .* needs driver 580 or newer" \
    || fail "env.sh's driver message: $msg"
  echo "refused: $msg"
fi
(PATH=$fake/bin:$PATH NORMLAB_PACK_NO_CHECK=1; source "$pack/env.sh" "$fake/python") || fail "NORMLAB_PACK_NO_CHECK=1 did not skip the checks"

# shellcheck disable=SC1091
source "$pack/env.sh" "$python"
site=$("$python" -c 'import importlib.util, os; print(os.path.dirname(os.path.dirname(importlib.util.find_spec("torch").origin)))')
for b in "$pack"/bin/*; do
  ldd "$b" > "$work/ldd.txt" || fail "ldd $b"
  ! grep -q "not found" "$work/ldd.txt" || { cat "$work/ldd.txt"; fail "$(basename "$b"): a library is not found"; }
  while read -r name path; do
    case $path in
      "$pack"/*|"$site"/*) ;;
      *) case $name in
           libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libutil.so*|ld-linux*|libstdc++.so*|libgcc_s.so*) ;;
           *) fail "$(basename "$b") loads $name from $path: neither the pack, torch nor the C runtime" ;;
         esac ;;
    esac
  done < <(awk '$2 == "=>" { print $1, $3 }' "$work/ldd.txt")
done
echo "every library resolves to the pack, torch's site-packages or the C runtime"

normlab version | tee "$work/version.txt"
grep -q "^normlab [0-9]" "$work/version.txt" || fail "normlab version printed no version"
# compat/ is what env.sh adds on a machine whose libstdc++ is older: the binaries run with it.
LD_LIBRARY_PATH=$pack/compat:$LD_LIBRARY_PATH normlab version > /dev/null || fail "normlab does not run with compat/"
normlab train --config "$pack/configs/tiny/lm.yaml" --out "$work/run" --set model.scheme=pre_norm \
  --set "data.train=$pack/data/kjv/shards" --set "data.tokenizer=$pack/data/kjv/tokenizer.model" \
  --set train.steps=1 --set train.device=cpu --set checkpoint.at_end=false --set eval.batches=1
"$python" - "$work/run/summary.json" <<'PY' || fail "the training step from the pack did not complete"
import json, math, sys
s = json.load(open(sys.argv[1]))
assert s["status"] == "completed" and s["steps"] == 1 and math.isfinite(s["final_train_loss"]), s
print(f"one CPU step from the pack: loss {s['final_train_loss']:.4f}, attention {s['attention_backend']}")
PY
normlab_gpu_tests --gtest_list_tests | grep -q "GpuKernels" || fail "normlab_gpu_tests did not list its tests"
normlab-bench-kernels > "$work/bench.txt" 2>&1 || { cat "$work/bench.txt"; fail "normlab-bench-kernels failed to start"; }
echo "PASS"
