#!/usr/bin/env bash
# Checkpoints of the official SiameseNorm code as a user moves them, on the built-in corpus
# fixture (CTest label slow): a siamese_hybrid run exported under the official names
# (safetensors and torch.save .pt), imported back from each, gives bitwise the same weights
# and the same `normlab eval` numbers; the imported run folder generates and fine-tunes with
# `train --resume`; bad input is named. The .pt half needs torch and safetensors in PYTHON.
# Usage: olmo_checkpoint.sh NORMLAB SOURCE_DIR CORPUS_DIR PYTHON WORK_DIR
set -euo pipefail
normlab=$1 src=$2 kjv=$3 python=$4 work=$5
rm -rf "$work" && mkdir -p "$work"
export NORMLAB_PYTHON=$python
fail() { echo "FAIL: $*"; exit 1; }
source "$(dirname "${BASH_SOURCE[0]}")/python_modules.sh"
require_python_modules "$python" torch safetensors

"$normlab" train --config "$src/configs/tiny/lm.yaml" --set "data.train=$kjv/shards" \
  --set "data.tokenizer=$kjv/tokenizer.model" --set train.steps=10 --out "$work/run" \
  > "$work/train.out" 2>&1 || { cat "$work/train.out"; fail "train"; }
"$normlab" export --format olmo --pt --checkpoint "$work/run" --out "$work/official" > "$work/export.out" 2>&1 \
  || { cat "$work/export.out"; fail "export --format olmo"; }
for f in model.safetensors model.pt normlab_config.yaml; do [ -s "$work/official/$f" ] || fail "no $f in the export"; done
"$python" - "$work/official" <<'EOF' || fail "the export's names are not the official ones"
import sys, torch
from safetensors.torch import load_file
st, pt = load_file(sys.argv[1] + "/model.safetensors"), torch.load(sys.argv[1] + "/model.pt", weights_only=True)
assert sorted(st) == sorted(pt) and all(torch.equal(st[k], pt[k]) for k in st), "model.pt != model.safetensors"
need = {"transformer.wte.weight", "transformer.ff_out.weight", "transformer.ln_f.weight",
        "transformer.ln_y_f.weight", "transformer.ln_final_f.weight"}
for l in range(2):
    need |= {"transformer.blocks.%d.%s" % (l, n) for n in
             ["att_proj.weight", "attn_out.weight", "q_norm.weight", "k_norm.weight", "v_norm.weight",
              "ff_proj.weight", "ff_out.weight", "c1", "attn_y_norm.weight", "ff_norm.weight",
              "ff_y_norm.weight", "ff_input_norm.weight"]}
assert set(st) == need, set(st) ^ need
EOF

cfg=$work/official/normlab_config.yaml
"$normlab" import --from olmo --checkpoint "$work/official/model.pt" --config "$cfg" --out "$work/from_pt" \
  > "$work/import1.out" 2>&1 || { cat "$work/import1.out"; fail "import of the .pt"; }
"$normlab" import --from olmo --checkpoint "$work/official" --config "$cfg" --out "$work/from_st" \
  > "$work/import2.out" 2>&1 || { cat "$work/import2.out"; fail "import of the folder"; }
"$python" - "$work/run/checkpoints/step-00000010" "$work/from_pt/checkpoints/step-00000000" \
  "$work/from_st/checkpoints/step-00000000" <<'EOF' || fail "imported weights differ from the run's"
import sys, torch
from safetensors.torch import load_file
a = load_file(sys.argv[1] + "/model.safetensors")
for other in sys.argv[2:]:
    b = load_file(other + "/model.safetensors")
    assert sorted(a) == sorted(b), other
    for k in a:
        assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), (other, k)
print("bitwise equal: %d tensors" % len(a))
EOF
for r in run from_pt from_st; do
  "$normlab" eval --checkpoint "$work/$r" --data "$kjv/shards" > "$work/eval_$r.out" 2>&1 || { cat "$work/eval_$r.out"; fail "eval $r"; }
  grep '^val:' "$work/eval_$r.out" > "$work/val_$r.txt" || fail "no val line from eval $r"
done
cmp "$work/val_run.txt" "$work/val_from_pt.txt" && cmp "$work/val_run.txt" "$work/val_from_st.txt" \
  || fail "eval numbers differ: $(cat "$work"/val_*.txt)"
"$normlab" generate --checkpoint "$work/from_pt" --prompt "And God said" --temperature 0 > "$work/gen.out" 2>&1 \
  || { cat "$work/gen.out"; fail "generate from the imported run"; }
"$normlab" train --config "$cfg" --out "$work/from_pt" --resume --set train.steps=2 > "$work/tune.out" 2>&1 \
  || { cat "$work/tune.out"; fail "fine-tuning the imported run with --resume"; }
grep -q "resumed from .*step-00000000 at step 0" "$work/tune.out" || fail "the fine-tuning did not start from the import"

# Bad input, named; nothing written.
expect_error() {  # expect_error PATTERN ARGS...
  local pattern=$1; shift
  rc=0; "$normlab" "$@" > "$work/err.out" 2>&1 || rc=$?
  [ "$rc" -eq 1 ] && grep -q -- "$pattern" "$work/err.out" || { cat "$work/err.out"; fail "expected '$pattern' from: $*"; }
}
expect_error "model.scheme = pre_norm" import --from olmo --checkpoint "$work/official" --config "$cfg" \
  --set model.scheme=pre_norm --out "$work/bad"
expect_error "model.tie_embeddings" import --from olmo --checkpoint "$work/official" --config "$cfg" \
  --set model.tie_embeddings=true --out "$work/bad"
expect_error "does not have:" import --from olmo --checkpoint "$work/official" --config "$cfg" \
  --set model.siamese.input_norm=false --out "$work/bad"
expect_error "transformer.blocks.0.ff_proj.weight (blocks.0.mlp.up.weight): \[352, 64\] in the file" \
  import --from olmo --checkpoint "$work/official" --config "$cfg" --set model.d_ff=128 --out "$work/bad"
expect_error "already holds checkpoints" import --from olmo --checkpoint "$work/official" --config "$cfg" --out "$work/from_st"
"$normlab" train --config "$src/configs/tiny/lm.yaml" --set "data.train=$kjv/shards" \
  --set "data.tokenizer=$kjv/tokenizer.model" --set model.scheme=pre_norm \
  --set train.steps=1 --out "$work/pre" > /dev/null 2>&1 || fail "train pre_norm"
expect_error "siamese_hybrid" export --format olmo --checkpoint "$work/pre" --out "$work/bad"
refused_both_ways() {  # refused_both_ways NAME CONFIG IMPORT_SET IMPORT_PATTERN EXPORT_PATTERN
  # import of the official checkpoint with IMPORT_SET, and export of a 1-step run of CONFIG,
  # each refused with its pattern
  local name=$1 config=$2 set=$3 import_pattern=$4 export_pattern=$5
  expect_error "$import_pattern" import --from olmo --checkpoint "$work/official" --config "$cfg" --set "$set" \
    --out "$work/bad"
  "$normlab" train --config "$src/configs/tiny/$config" --set "data.train=$kjv/shards" \
    --set "data.tokenizer=$kjv/tokenizer.model" --set train.steps=1 --out "$work/$name" > /dev/null 2>&1 \
    || fail "train $name"
  expect_error "$export_pattern" export --format olmo --checkpoint "$work/$name" --out "$work/bad"
}
# Hyper-Connections: no official names, refused both ways with the scheme and the reason
refused_both_ways hyper hyper_dhc2.yaml model.scheme=hyper \
  "model.scheme = hyper: the official SiameseNorm code's checkpoints have no names for Hyper-Connections" \
  "model.scheme = hyper: .*no names for Hyper-Connections"
# SiameseNorm x Hyper-Connections: the official code has none; refused both ways, pointing at
# the exports that hold it
refused_both_ways siamese_hyper siamese_hybrid_hyper.yaml model.siamese.hyper.n=2 \
  "model.siamese.hyper.n = 2: the official SiameseNorm code has no Hyper-Connections" \
  "model.siamese.hyper.n = 2: .*use --format normlab or --format hf"
[ ! -e "$work/bad" ] || fail "a failed command left $work/bad"
echo "PASS"
