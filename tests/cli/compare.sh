#!/usr/bin/env bash
# `normlab compare` (docs/schemes.md, "Equivalence tests"): hyper with one static stream against
# pre_norm through configs/maps/hyper_vs_pre_norm.map is EQUIVALENT at 1e-10 with a row for the
# logits, the loss and every Pre-Norm gradient; two streams are DIFFERENT (exit 3, the final
# norm's eps); a map rule that matches nothing, a parameter without a counterpart and a shape that
# disagrees stop with an error naming the rule's line or the parameter; logits that are NaN or
# infinite on one side or both are DIFFERENT, the logits named as the worst row; a NaN in the loss
# beside equal logits (an MoE router's z-loss weighted 0) is DIFFERENT, the loss the worst row; a
# --max-rel that is not a positive, finite number (-1, 0, nan, inf, ...) is refused by name, and
# so are sizes out of bounds or beyond the machine's memory. Self-contained; seconds.
# Usage: compare.sh NORMLAB SOURCE_DIR CORPUS_DIR PYTHON WORK_DIR (CORPUS_DIR, PYTHON unused)
set -euo pipefail
normlab=$1 src=$2 work=$5
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
hyper=(--config "$src/configs/tiny/hyper_dhc2.yaml" --set model.hyper.dynamic=false)
pre=(--against "$src/configs/tiny/lm.yaml" --set-against model.scheme=pre_norm)
map=(--map "$src/configs/maps/hyper_vs_pre_norm.map")

"$normlab" compare "${hyper[@]}" --set model.hyper.n=1 "${pre[@]}" "${map[@]}" --max-rel 1e-10 \
  > "$work/n1.out" 2>&1 || { cat "$work/n1.out"; fail "hyper n = 1 against pre_norm"; }
cat "$work/n1.out"
grep -q "^EQUIVALENT: worst .* <= 1.000e-10" "$work/n1.out" || fail "n = 1 is not EQUIVALENT"
# tiny: embedding, head, final norm, and per block attn_norm, qkv, out, mlp_norm, up, down
rows=$(grep -c "^grad " "$work/n1.out")
[ "$rows" = 15 ] || fail "$rows gradient rows, want 15 (every Pre-Norm parameter)"
grep -q "^logits  *[0-9]" "$work/n1.out" && grep -q "^loss  *[0-9]" "$work/n1.out" || fail "no logits or loss row"
grep -q "^held in A, not compared (8): blocks.0.attn_hc.static_alpha=init" "$work/n1.out" \
  || fail "the held connections are not listed"

rc=0
"$normlab" compare "${hyper[@]}" --set model.hyper.n=2 "${pre[@]}" "${map[@]}" --max-rel 1e-10 \
  > "$work/n2.out" 2>&1 || rc=$?
[ "$rc" = 3 ] || { cat "$work/n2.out"; fail "n = 2: exit code $rc, want 3"; }
grep -q "^DIFFERENT: worst .* > 1.000e-10" "$work/n2.out" || fail "n = 2 is not DIFFERENT"

# Non-finite outputs fail the verdict and are named as the worst row: B's head held at 1e308
# overflows B's logits where A's are finite; the same head on both sides of one model gives the
# same non-finite logits in A and B, which fail too (the verdict vouches for finite numbers only).
printf 'a: blocks.*.*_hc.* = init\na: head.weight = init\nb: head.weight = 1e308\n' > "$work/inf-b.map"
rc=0
"$normlab" compare "${hyper[@]}" --set model.hyper.n=1 "${pre[@]}" --map "$work/inf-b.map" \
  --max-rel 1e-10 > "$work/inf-b.out" 2>&1 || rc=$?
[ "$rc" = 3 ] || { cat "$work/inf-b.out"; fail "B's logits non-finite: exit code $rc, want 3"; }
grep -q "^worst: inf (logits: [^)]* in B)" "$work/inf-b.out" && grep -q "^DIFFERENT: worst inf > 1.000e-10" "$work/inf-b.out" \
  || { cat "$work/inf-b.out"; fail "B's non-finite logits are not the worst row, or not DIFFERENT"; }
printf 'a: head.weight = 1e308\nb: head.weight = 1e308\n' > "$work/inf-ab.map"
rc=0
"$normlab" compare --config "$src/configs/tiny/lm.yaml" --set model.scheme=pre_norm "${pre[@]}" \
  --map "$work/inf-ab.map" --max-rel 1e-10 > "$work/inf-ab.out" 2>&1 || rc=$?
[ "$rc" = 3 ] || { cat "$work/inf-ab.out"; fail "the same non-finite logits on both sides: exit code $rc, want 3"; }
grep -q "^worst: inf (logits: [^)]* in A and B)" "$work/inf-ab.out" && grep -q "^DIFFERENT: worst inf" "$work/inf-ab.out" \
  || { cat "$work/inf-ab.out"; fail "the same non-finite logits in A and B are not the worst row, or not DIFFERENT"; }
grep "^worst: " "$work/inf-b.out" "$work/inf-ab.out"
# A NaN in the loss while the logits agree: routers held at 1e100 in A and 1e200 in B route
# alike (every expert's logit equal), but B's router z-loss, weighted 0, is 0 x inf = NaN. The
# loss is the worst row, named, and the verdict fails.
printf 'a: blocks.*.mlp.router.weight = 1e100\nb: blocks.*.mlp.router.weight = 1e200\n' > "$work/zloss.map"
moe=(--config "$src/configs/moe/tiny.yaml" --set model.moe.z_loss_weight=0)
rc=0
"$normlab" compare "${moe[@]}" --against "$src/configs/moe/tiny.yaml" --set-against model.moe.z_loss_weight=0 \
  --map "$work/zloss.map" --max-rel 1e-10 > "$work/zloss.out" 2>&1 || rc=$?
[ "$rc" = 3 ] || { cat "$work/zloss.out"; fail "B's loss NaN: exit code $rc, want 3"; }
grep -q "^logits  *0.000e+00 " "$work/zloss.out" && grep -q "^worst: inf (loss: NaN in B)" "$work/zloss.out" \
  && grep -q "^DIFFERENT: worst inf" "$work/zloss.out" \
  || { cat "$work/zloss.out"; fail "B's NaN loss beside equal logits is not the worst row, or not DIFFERENT"; }

# Errors name what is wrong.
expect_error() {  # expect_error NAME PATTERN ARGS...: exit 1 with PATTERN in the message
  local name=$1 pattern=$2; shift 2
  rc=0; "$normlab" compare "$@" > "$work/$name.out" 2>&1 || rc=$?
  [ "$rc" = 1 ] || { cat "$work/$name.out"; fail "$name: exit code $rc, want 1"; }
  grep -q -- "$pattern" "$work/$name.out" || { cat "$work/$name.out"; fail "$name: no '$pattern'"; }
}
expect_error unmapped "parameter 'blocks.0.attn_hc.static_alpha' of A (hyper) has no counterpart in B (pre_norm)" \
  "${hyper[@]}" "${pre[@]}"
printf 'a: blocks.*.*_hc.* = init\n# a typo:\nblocks.*.attn_nrom.weight -> blocks.*.attn_norm.weight\n' > "$work/typo.map"
expect_error typo "typo.map:3: 'blocks.\*.attn_nrom.weight' matches no parameter of A (hyper)" \
  "${hyper[@]}" "${pre[@]}" --map "$work/typo.map"
printf 'a: blocks.*.*_hc.* = zero\n' > "$work/value.map"
expect_error value "value.map:1: value 'zero' is neither a number nor 'init'" \
  "${hyper[@]}" "${pre[@]}" --map "$work/value.map"
printf 'a: blocks.*.*_hc.* = init\nblocks.*.x\0y -> z\n' > "$work/nul.map"
expect_error nul "nul.map:2: a NUL byte (0x00) at column 11: a weight map is text" \
  "${hyper[@]}" "${pre[@]}" --map "$work/nul.map"
expect_error shape "parameter 'blocks.0.mlp.up.weight' of A (hyper) has shape \[352, 64\], 'blocks.0.mlp.up.weight' of B (pre_norm) has \[64, 64\]" \
  "${hyper[@]}" "${pre[@]}" "${map[@]}" --set-against model.d_ff=32
# --max-rel is a positive, finite number: anything else stops before any work, naming the flag
# and the value.
for bad in -1 0 nan inf -inf 1e400 abc ""; do
  expect_error "max-rel-[$bad]" "--max-rel '$bad': must be a positive, finite number" \
    "${hyper[@]}" --set model.hyper.n=1 "${pre[@]}" "${map[@]}" --max-rel "$bad"
done
# Sizes out of bounds, or a model too large for this machine's memory, stop with the key and
# value before anything is allocated (not std::bad_alloc or an abort).
expect_error vocab-bound "model.vocab_size = 100000000000: must lie in \[1, 2^31 - 1\]" \
  "${hyper[@]}" --set model.vocab_size=100000000000 "${pre[@]}"
expect_error vocab-memory "model.vocab_size = 2000000000: a model of .* parameters .* more than the .* of cpu" \
  "${hyper[@]}" "${pre[@]}" --set-against model.vocab_size=2000000000
echo PASS
