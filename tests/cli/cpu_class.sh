#!/usr/bin/env bash
# The CPU class as the kernels see it, on the built-in corpus fixture: `normlab version` names
# oneDNN's ISA, the linear path and bf16 native or emulated; training in the class the test runs
# in (CI runs it natively and in every simulated class) logs that class as `version` and auto's
# choice as `info --precision` give them in the same environment; lowered to AVX2 (tools/simulate_cpu.sh, as on an
# AVX2-only CPU; skipped where the test already runs below AVX2) training runs (ATen's linear),
# train.precision = auto picks fp32 and an
# explicit bf16 warns with the size of the slowdown; and a LibTorch error forced in the forward
# of a block (NORMLAB_FAULT=torch_error:blocks:L) reaches the user as one line naming the step
# and the block, exit code 1, its C++ backtrace in train.log and on the terminal only with
# TORCH_SHOW_CPP_STACKTRACES=1, in train and in eval; so does an exception that is not LibTorch's
# (NORMLAB_FAULT=std_error:blocks:L), as an "unexpected" error. Seconds.
# Usage: cpu_class.sh NORMLAB SOURCE_DIR CORPUS_DIR PYTHON WORK_DIR
set -euo pipefail
normlab=$1 src=$2 kjv=$3 work=$5
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
tiny=(--config "$src/configs/tiny/lm.yaml" --set "data.train=$kjv/shards"
      --set "data.tokenizer=$kjv/tokenizer.model" --set eval.batches=1)
avx2=("$src/tools/simulate_cpu.sh" avx2)

"$normlab" version > "$work/version.out"
grep -Eq "^  cpu class: oneDNN [A-Z0-9_]+.*, ATen (AVX512|AVX2|DEFAULT), linear through (oneDNN|ATen), bf16 (emulated|native \((AMX|AVX512-BF16)\))$" \
  "$work/version.out" || { cat "$work/version.out"; fail "version: no cpu class line"; }

# Training in this environment's class: train.log names the class as `normlab version` does
# here and auto's choice as `normlab info --precision` does for the same config (the same
# decision: measured where bf16 is native, then cached; the part before the first ';' says what
# runs), and three steps train.
class_line=$(sed -n 's/^  cpu class: //p' "$work/version.out")
grep -q "^train.precision = auto on cpu: " "$work/version.out" || { cat "$work/version.out"; fail "version: no line for train.precision = auto"; }
"$normlab" info "${tiny[@]}" --set train.precision=auto --set train.device=cpu --precision > "$work/info.out" \
  || { cat "$work/info.out"; fail "info --precision"; }
auto_line=$(sed -n 's/^train.precision = auto here: //p' "$work/info.out")
[ -n "$auto_line" ] || { cat "$work/info.out"; fail "info --precision: no line for train.precision = auto"; }
"$normlab" train "${tiny[@]}" --set train.steps=3 --set train.precision=auto --set train.device=cpu --out "$work/own" \
  > "$work/own.out" 2>&1 || { cat "$work/own.out"; fail "train in this CPU class ($class_line)"; }
grep -qF "CPU: $class_line" "$work/own/train.log" || { cat "$work/own/train.log"; fail "train.log's CPU class is not version's: $class_line"; }
grep -qF "precision: ${auto_line%%;*};" "$work/own/train.log" || { cat "$work/own/train.log"; fail "train.log's precision is not info's: $auto_line"; }
grep -q '"step":3' "$work/own/metrics.jsonl" || fail "no third step in this CPU class"
echo "trained 3 steps as: $class_line"

if grep -q "ATen DEFAULT" "$work/version.out"; then
  echo "this environment is below AVX2: the AVX2 case is skipped (the lines above trained in it)"
else
"${avx2[@]}" "$normlab" version > "$work/version_avx2.out"
grep -q "^  cpu class: oneDNN AVX2 (limit AVX2; the CPU has [A-Z0-9_]*), ATen AVX2, linear through ATen, bf16 emulated$" "$work/version_avx2.out" \
  || grep -q "^  cpu class: oneDNN AVX2, ATen AVX2, linear through ATen, bf16 emulated$" "$work/version_avx2.out" \
  || { cat "$work/version_avx2.out"; fail "version under ONEDNN_MAX_CPU_ISA=AVX2"; }
grep -q "^train.precision = auto on cpu: fp32 on the CPU" "$work/version_avx2.out" \
  || { cat "$work/version_avx2.out"; fail "auto is not fp32 with oneDNN at AVX2"; }

# Training as on an AVX2-only CPU: auto is fp32, the linear runs through ATen, the loss is finite.
"${avx2[@]}" "$normlab" train "${tiny[@]}" --set train.steps=3 --set train.precision=auto \
  --out "$work/avx2" > "$work/avx2.out" 2>&1 || { cat "$work/avx2.out"; fail "train with oneDNN at AVX2"; }
grep -q "precision: fp32 on the CPU; train.precision = auto" "$work/avx2/train.log" || { cat "$work/avx2/train.log"; fail "auto under AVX2"; }
grep -q "CPU: oneDNN AVX2.*linear through ATen, bf16 emulated" "$work/avx2/train.log" || fail "train.log has no CPU class"
grep -q '"step":3' "$work/avx2/metrics.jsonl" || fail "no third step"
# An explicit bf16 runs, and the warning says how much slower it is.
"${avx2[@]}" "$normlab" train "${tiny[@]}" --set train.steps=1 --set train.precision=bf16 \
  --out "$work/avx2_bf16" > "$work/avx2_bf16.out" 2>&1 || { cat "$work/avx2_bf16.out"; fail "bf16 with oneDNN at AVX2"; }
grep -q "bf16 is emulated, correct but 30x to 600x slower than fp32 in matmuls" "$work/avx2_bf16.out" \
  || { cat "$work/avx2_bf16.out"; fail "the bf16 warning gives no size"; }
fi

# one_error_line OUT COMMAND: OUT's last line is the error, the only line of the error, and no
# C++ frame is on the terminal.
one_error_line() {
  local out=$1 pattern=$2
  tail -n 1 "$out" | grep -Eq "$pattern" || { cat "$out"; fail "last line is not '$pattern'"; }
  [ "$(grep -c 'LibTorch error' "$out")" = 1 ] || { cat "$out"; fail "the error is not one line"; }
  ! grep -Eq "frame #|Exception raised from" "$out" || { cat "$out"; fail "a C++ backtrace on the terminal"; }
}
rc=0
NORMLAB_FAULT=torch_error:blocks:1 "$normlab" train "${tiny[@]}" --set train.steps=2 --out "$work/fault" \
  > "$work/fault.out" 2>&1 || rc=$?
[ "$rc" = 1 ] || { cat "$work/fault.out"; fail "train with a LibTorch error exited $rc, want 1"; }
one_error_line "$work/fault.out" \
  "^normlab train: LibTorch error: training step 1, forward of blocks.1: a LibTorch error forced by NORMLAB_FAULT=torch_error:blocks:1$"
grep -q "LibTorch error in training step 1, forward of blocks.1, with its backtrace:" "$work/fault/train.log" \
  || fail "train.log has no backtrace"
grep -Eq "frame #|Exception raised from" "$work/fault/train.log" || fail "train.log has no C++ frame"
rc=0
TORCH_SHOW_CPP_STACKTRACES=1 NORMLAB_FAULT=torch_error:blocks:0 "$normlab" train "${tiny[@]}" --set train.steps=2 \
  --out "$work/fault_shown" > "$work/fault_shown.out" 2>&1 || rc=$?
[ "$rc" = 1 ] || fail "train with TORCH_SHOW_CPP_STACKTRACES=1 exited $rc"
grep -q "^normlab train: LibTorch error: training step 1, forward of blocks.0: " "$work/fault_shown.out" || fail "shown: no error line"
grep -Eq "frame #|Exception raised from" "$work/fault_shown.out" || fail "TORCH_SHOW_CPP_STACKTRACES=1 shows no backtrace"

# An exception that is not LibTorch's (a std::runtime_error of two lines) in the same place: the
# same one line with its context, as an "unexpected" error, and its text in train.log.
rc=0
NORMLAB_FAULT=std_error:blocks:1 "$normlab" train "${tiny[@]}" --set train.steps=2 --out "$work/std_fault" \
  > "$work/std_fault.out" 2>&1 || rc=$?
[ "$rc" = 1 ] || { cat "$work/std_fault.out"; fail "train with a std::runtime_error exited $rc, want 1"; }
tail -n 1 "$work/std_fault.out" | grep -qx "normlab train: unexpected error: training step 1, forward of blocks.1: a std::runtime_error forced by NORMLAB_FAULT=std_error:blocks:1; its second line" \
  || { cat "$work/std_fault.out"; fail "the std::runtime_error is not one line with its context"; }
[ "$(grep -c "its second line" "$work/std_fault.out")" = 1 ] || { cat "$work/std_fault.out"; fail "the std::runtime_error spans lines"; }
grep -q "unexpected error in training step 1, forward of blocks.1: a std::runtime_error" "$work/std_fault/train.log" \
  || fail "train.log does not hold the unexpected error"

# eval of a trained model, the same error in its forward.
rc=0
NORMLAB_FAULT=torch_error:blocks:0 "$normlab" eval --checkpoint "$work/own" --data "$kjv/shards" --batches 1 \
  > "$work/eval_fault.out" 2>&1 || rc=$?
[ "$rc" = 1 ] || { cat "$work/eval_fault.out"; fail "eval with a LibTorch error exited $rc, want 1"; }
one_error_line "$work/eval_fault.out" \
  "^normlab eval: LibTorch error: evaluation of $kjv/shards, forward of blocks.0: a LibTorch error forced by NORMLAB_FAULT=torch_error:blocks:0$"
rc=0
NORMLAB_FAULT=std_error:blocks:0 "$normlab" eval --checkpoint "$work/own" --data "$kjv/shards" --batches 1 \
  > "$work/eval_std_fault.out" 2>&1 || rc=$?
[ "$rc" = 1 ] || { cat "$work/eval_std_fault.out"; fail "eval with a std::runtime_error exited $rc, want 1"; }
tail -n 1 "$work/eval_std_fault.out" | grep -qx "normlab eval: unexpected error: evaluation of $kjv/shards, forward of blocks.0: a std::runtime_error forced by NORMLAB_FAULT=std_error:blocks:0; its second line" \
  || { cat "$work/eval_std_fault.out"; fail "eval: the std::runtime_error is not one line with its context"; }
echo PASS
