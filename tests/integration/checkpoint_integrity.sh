#!/usr/bin/env bash
# What a checkpoint folder holds and how damage is caught, on 2 ranks:
# - retention: save every step for 10 steps with keep_last=2, keep_every=4 -> steps 4, 8, 9, 10;
# - `trainer inspect` prints step, layout, every shape (the same as `h5ls -r`) and "verifies yes";
#   it takes a checkpoint or a dataset by content (a checkpoint named run10.h5, a dataset in a
#   folder named mycheckpoints);
#   each tensor's crc32 attribute equals Python's zlib.crc32 of its bytes (independent CRC);
# - one flipped byte in a tensor: inspect says NO and exits 4 (init_from too, naming another
#   init_from as the fix); `--resume auto` warns, falls back to step 9, sets the damaged folder
#   aside, and redoes step 10 with the same loss and bit-identical parameters as before;
# - after such a fallback, retention counts the set-aside folder as none of the kept ones;
# - --resume of a checkpoint folder takes its newest step; a wrong path's hint names real ones;
# - a flipped byte in a copy without HDF5's Fletcher32 filter: caught by the CRC-32 alone, by
#   inspect, --resume, and the weights' readers (export, eval);
# - a flipped bit in a manifest attribute (HDF5's metadata checksum) or a deleted one: inspect and
#   --resume exit 4 naming it, --resume auto falls back;
# - a folder whose only checkpoint is damaged: exit 4, "no checkpoint ... verifies";
# - a leftover step-*.tmp is reported and removed at start;
# - a config of another model shape: exit 4 naming each differing key;
# - impossible progress attributes (negative step, samples beyond any global batch, a folder
#   copied under another step's name): inspect and --resume exit 4 naming them.
source "$(dirname "$0")/lib.sh"
source "$TESTS_DIR/checkpoint_lib.sh"
make_small_dataset data.h5
COMMON=(-o Data.train_path=data.h5 -o Data.val_fraction=0 -o Global.device=cpu
        -o Model.hidden_size=64 -o Model.num_layers=2 -o Model.num_heads=4 -o Model.max_seq_len=32
        -o Global.global_batch_size=8 -o Global.micro_batch_size=2 -o Engine.max_steps=10
        -o Engine.logging_freq=1 -o Engine.eval_freq=0 -o Optimizer.warmup_steps=2
        -o Engine.save_steps=1 -o Checkpoint.keep_last=2 -o Checkpoint.keep_every=4)
CKPT=run/checkpoints
run_np 2 train "${COMMON[@]}" -o Engine.output_dir=run > run.log 2>&1 || { tail run.log; fail "training"; }

# Retention.
kept=$(cd $CKPT && echo step-*)
[ "$kept" = "step-00000004 step-00000008 step-00000009 step-00000010" ] ||
  fail "retention kept '$kept', expected steps 4, 8 (keep_every=4), 9 and 10 (keep_last=2)"
[ "$(cat $CKPT/latest)" = step-00000010 ] || fail "latest is '$(cat $CKPT/latest)'"
grep -q '"checkpoint_bytes": [1-9]' run/metrics.jsonl || fail "no checkpoint_bytes in the metrics"
grep -q '"checkpoint_save_s": ' run/metrics.jsonl || fail "no checkpoint_save_s in the metrics"
echo "ok: retention kept $kept; save metrics present"

# inspect vs h5ls.
FILE=$CKPT/step-00000010/checkpoint.h5
expect_verified $CKPT/step-00000010
cp inspect.out inspect10.out
grep -q "^  step             10$" inspect10.out || fail "inspect: no step 10"
grep -q "^  written on       dp=2 tp=1 pp=1" inspect10.out || fail "inspect: no writing layout"
h5ls -r "$FILE" > h5ls.out
# h5ls: "/model/NAME Dataset {A, B}"; inspect: "    NAME [A, B]".
diff <(grep '^/model/' h5ls.out | sed -E 's|^/model/([^ ]+) +Dataset \{(.*)\}|\1 [\2]|' | sort) \
     <(grep -E '^    transformer' inspect10.out | sed 's/^ *//' | sort) ||
  fail "inspect's shapes differ from h5ls -r"
for group in /optim/exp_avg /optim/exp_avg_sq; do
  [ "$(grep -c "^$group/" h5ls.out)" -eq "$(grep -c '^/model/' h5ls.out)" ] ||
    fail "$group does not hold one tensor per parameter"
done
echo "ok: inspect shows step 10, layout dp=2, $(grep -c '^/model/' h5ls.out) shapes as h5ls -r does"
if command -v python3 > /dev/null; then
  checked=0
  for dataset in $(grep -o '^/[^ ]*' h5ls.out | grep -E '^/(model|optim)/.*\.'); do
    h5dump -d "$dataset" -b LE -o tensor.bin "$FILE" > /dev/null
    stored=$(h5dump -a "$dataset/crc32" "$FILE" | grep -oE '\(0\): [0-9]+' | cut -d' ' -f2)
    zlib=$(python3 -c 'import sys, zlib; print(zlib.crc32(open("tensor.bin", "rb").read()))')
    [ "$stored" = "$zlib" ] || fail "$dataset: crc32 attribute $stored, zlib.crc32 $zlib"
    checked=$((checked + 1))
  done
  echo "ok: $checked crc32 attributes equal Python's zlib.crc32 of the tensor bytes"
fi

# inspect tells a checkpoint from a dataset by content, not by the path's text.
cp "$FILE" run10.h5 && mkdir -p mycheckpoints && cp data.h5 mycheckpoints/train.h5
"$TRAINER" inspect run10.h5 > renamed.out 2>&1 || { cat renamed.out; fail "inspect run10.h5"; }
grep -q "^checkpoint run10.h5" renamed.out || { cat renamed.out; fail "run10.h5 not shown as a checkpoint"; }
"$TRAINER" inspect mycheckpoints/train.h5 > renamed.out 2>&1 || { cat renamed.out; fail "inspect mycheckpoints/train.h5"; }
grep -q "^dataset mycheckpoints/train.h5" renamed.out || { cat renamed.out; fail "train.h5 not shown as a dataset"; }
echo "ok: inspect takes a checkpoint and a dataset for what they hold, whatever their names"

# One flipped byte in step 10: refused; --resume auto falls back to step 9 and redoes step 10.
cp "$FILE" good10.h5
flip_tensor_byte "$FILE" /model/transformer.h.1.mlp.c_fc.weight
set +e
"$TRAINER" inspect $CKPT/step-00000010 > bad_inspect.out 2> bad_inspect.err
rc=$?
set -e
[ $rc -eq 4 ] || { cat bad_inspect.out bad_inspect.err; fail "inspect of a damaged file: exit $rc"; }
grep -q "^  verifies         NO" bad_inspect.out || fail "inspect does not say NO"
one_error_line bad_inspect.err "Fletcher32 chunk checksum.*transformer.h.1.mlp.c_fc.weight"
echo "ok: inspect refuses the damaged file: $(cat bad_inspect.err)"
# The same file as Checkpoint.init_from: the advice names what init_from takes instead.
set +e
"$TRAINER" train "${COMMON[@]}" -o Engine.output_dir=init_damaged -o Engine.save_steps=0 \
  -o Checkpoint.init_from=$CKPT/step-00000010 > init_damaged.out 2> init_damaged.err
rc=$?
set -e
[ $rc -eq 4 ] || { cat init_damaged.err; fail "init_from a damaged file: exit $rc"; }
# HDF5's reason, not "unknown HDF5 error" (the read's clean-up had cleared HDF5's error stack).
one_error_line init_damaged.err "transformer.h.1.mlp.c_fc.weight, rank 0): H5Dread: data error detected by Fletcher32 checksum.*The file is damaged: use another checkpoint .*Checkpoint.init_from, eval, sample and export take an older step folder"
echo "ok: init_from a damaged file: $(cat init_damaged.err)"
mkdir $CKPT/step-00000011.tmp && echo partial > $CKPT/step-00000011.tmp/checkpoint.h5
first10=$(step_losses run/metrics.jsonl | grep '^10 ')
run_np 2 train "${COMMON[@]}" -o Engine.output_dir=run --resume auto > fallback.log 2>&1 ||
  { cat fallback.log; fail "resume after damage"; }
grep -q "warning: removing incomplete checkpoint $CKPT/step-00000011.tmp" fallback.log ||
  fail "the leftover .tmp was not reported"
[ ! -e $CKPT/step-00000011.tmp ] || fail "the leftover .tmp was not removed"
grep -q "warning: checkpoint $CKPT/step-00000010 does not verify, falling back to the previous one" \
  fallback.log || { cat fallback.log; fail "no fallback warning"; }
grep -q "resumed from $CKPT/step-00000009 at step 9 " fallback.log || fail "did not resume from step 9"
grep -q "warning: set aside $CKPT/step-00000010 as $CKPT/step-00000010.damaged: it does not verify" \
  fallback.log || { cat fallback.log; fail "the damaged step 10 was not set aside"; }
grep -qE "^step +10/" fallback.log || fail "step 10 was not redone"
# ETA from the second logged window of a run on: the first (here the resumed run's step 10) holds
# the start-up.
grep -E "^step +2/" run.log | grep -q "| ETA " || fail "no ETA on step 2 of the first run"
grep -E "^step +10/" fallback.log | grep -q "ETA" && fail "an ETA on the resumed run's first line"
# The first run's record of step 10 gave way to the redone step's: metrics.jsonl holds it once.
[ "$(step_losses run/metrics.jsonl | grep -c '^10 ')" -eq 1 ] || fail "step 10 is not logged exactly once"
[ "$(step_losses run/metrics.jsonl | grep '^10 ')" = "$first10" ] ||
  fail "the redone step 10 has another loss than the first run's ($first10)"
"$COMPARE_CHECKPOINTS" good10.h5 "$FILE" 0 || fail "the re-saved step 10 differs from the first"
expect_verified $CKPT/step-00000010
echo "ok: --resume auto fell back to step 9; step 10 redone bit-identically and re-saved"

# Retention after a fallback: keep_last=2 holds steps 4 and 6; step 6 is damaged, the resume falls
# back to 4 and saves step 5. The damaged folder is set aside, not counted among the two kept, so
# step 4 stays (before, step 6 and 5 were kept and the good step 4 deleted).
ASIDE=(-o Engine.output_dir=aside -o Checkpoint.keep_every=0 -o Engine.save_steps=2)
run_np 2 train "${COMMON[@]}" "${ASIDE[@]}" -o Engine.max_steps=6 > aside.log 2>&1 ||
  { tail aside.log; fail "training to step 6"; }
flip_tensor_byte aside/checkpoints/step-00000006/checkpoint.h5 /model/transformer.wpe.weight
run_np 2 train "${COMMON[@]}" "${ASIDE[@]}" -o Engine.max_steps=5 -o Engine.save_steps=5 \
  --resume auto > aside_resume.log 2>&1 || { cat aside_resume.log; fail "resume after damage"; }
kept=$(cd aside/checkpoints && echo step-*)
[ "$kept" = "step-00000004 step-00000005 step-00000006.damaged" ] ||
  { cat aside_resume.log; fail "after the fallback the folder holds '$kept'"; }
[ "$(cat aside/checkpoints/latest)" = step-00000005 ] || fail "latest is '$(cat aside/checkpoints/latest)'"
echo "ok: the damaged step 6 set aside; keep_last=2 kept steps 4 and 5"

# --resume with a checkpoint folder: its newest step that verifies (as eval, sample and export
# take one); a path that holds no checkpoint names one that exists.
run_np 2 train "${COMMON[@]}" "${ASIDE[@]}" -o Engine.max_steps=6 --resume aside/checkpoints \
  > folder_resume.log 2>&1 || { cat folder_resume.log; fail "--resume aside/checkpoints"; }
grep -q "resumed from aside/checkpoints/step-00000005 at step 5 " folder_resume.log ||
  { cat folder_resume.log; fail "--resume of a checkpoint folder did not take its step 5"; }
set +e
run_np 2 train "${COMMON[@]}" "${ASIDE[@]}" --resume aside/checkpoint > typo.out 2> typo.err
rc=$?
set -e
[ $rc -eq 4 ] || { cat typo.err; fail "--resume of a missing path: exit $rc"; }
one_error_line typo.err "no checkpoint at aside/checkpoint (--resume or Checkpoint.resume): it does not exist. .*e.g. --resume aside/checkpoints/step-00000006 .*--resume aside/checkpoints (its newest that verifies)"
echo "ok: --resume of a checkpoint folder takes its newest step; $(grep 'error: ' typo.err)"

# The CRC-32 alone: a copy without the Fletcher32 filter, contiguous, then one flipped byte.
mkdir -p crc/step-00000009
h5repack -f NONE -l CONTI $CKPT/step-00000009/checkpoint.h5 crc/step-00000009/checkpoint.h5
expect_verified crc/step-00000009  # a faithful copy still verifies
flip_tensor_byte crc/step-00000009/checkpoint.h5 /optim/exp_avg/transformer.h.0.attn.c_attn.weight
set +e
"$TRAINER" inspect crc/step-00000009 > crc_inspect.out 2> crc_inspect.err
rc=$?
set -e
[ $rc -eq 4 ] || { cat crc_inspect.out crc_inspect.err; fail "inspect without Fletcher32: exit $rc"; }
one_error_line crc_inspect.err "fails its CRC-32 checksum (.*transformer.h.0.attn.c_attn.weight)"
echo "ok: without Fletcher32 the CRC-32 catches it: $(cat crc_inspect.err)"
set +e
run_np 2 train "${COMMON[@]}" -o Engine.output_dir=crc_run --resume crc/step-00000009 > crc_run.out 2> crc_run.err
rc=$?
set -e
[ $rc -eq 4 ] || { cat crc_run.err; fail "--resume of a damaged checkpoint: exit $rc"; }
one_error_line crc_run.err "CRC-32"

# refused_as_damage FOLDER PATTERN WHAT: inspect says so and --resume FOLDER stops, both with exit
# 4 and an error matching PATTERN.
refused_as_damage() {
  local folder=$1 pattern=$2 what=$3 rc rc_resume
  set +e
  "$TRAINER" inspect "$folder" > damage.out 2> damage.err
  rc=$?
  run_np 2 train "${COMMON[@]}" -o Engine.output_dir=damage_run --resume "$folder" \
    > damage_resume.out 2> damage_resume.err
  rc_resume=$?
  set -e
  [[ $rc -eq 4 ]] && grep -q "$pattern" damage.out damage.err ||
    { cat damage.out damage.err; fail "inspect of $what: exit $rc"; }
  [[ $rc_resume -eq 4 ]] || { cat damage_resume.err; fail "--resume of $what: exit $rc_resume"; }
  one_error_line damage_resume.err "$pattern"
}

# readers_refuse DIR PATTERN: export and eval of the checkpoint in DIR/step-00000009 stop with
# exit 4 and one error line matching PATTERN.
readers_refuse() {
  local dir=$1 pattern=$2 reader rc
  for reader in "export $dir/step-00000009 --output ${dir}_export" \
                "eval $dir/step-00000009 --data data.h5 --batches 1"; do
    set +e
    "$TRAINER" $reader > reader.out 2> reader.err
    rc=$?
    set -e
    [ $rc -eq 4 ] || { cat reader.out reader.err; fail "${reader%% *} of $dir: exit $rc"; }
    one_error_line reader.err "$pattern"
  done
}
# Readers that take the weights alone check each tensor's CRC-32 too: export and eval of a copy
# without Fletcher32 with one flipped weight byte stop with exit 4 (they wrote out the damage).
mkdir -p crcw/step-00000009
h5repack -f NONE -l CONTI $CKPT/step-00000009/checkpoint.h5 crcw/step-00000009/checkpoint.h5
flip_tensor_byte crcw/step-00000009/checkpoint.h5 /model/transformer.h.0.mlp.c_fc.weight
readers_refuse crcw "fails its CRC-32 checksum (crcw/step-00000009/checkpoint.h5, /model/transformer.h.0.mlp.c_fc.weight)"
[ ! -e crcw_export/model.safetensors ] || fail "export wrote the damaged weights out"
echo "ok: export and eval check the weights' CRC-32: $(cat reader.err)"
# A copy compressed with h5repack (fewer bytes stored than its shapes take) verifies and loads.
mkdir -p gzip/step-00000009
h5repack -f GZIP=6 $CKPT/step-00000009/checkpoint.h5 gzip/step-00000009/checkpoint.h5
"$TRAINER" inspect gzip/step-00000009 > gzip.out 2>&1 || { cat gzip.out; fail "inspect of a gzip copy"; }
"$TRAINER" eval gzip/step-00000009 --data data.h5 --batches 1 > gzip.out 2>&1 ||
  { cat gzip.out; fail "eval of a gzip copy"; }
# A tensor of a format-2 checkpoint without its crc32 attribute is damaged, not an older file:
# export and eval stop too (they took it unchecked).
mkdir -p crcm/step-00000009
cp $CKPT/step-00000009/checkpoint.h5 crcm/step-00000009/
"$CHECKPOINT_CONFIG" crcm/step-00000009/checkpoint.h5 \
  --delete /model/transformer.h.0.mlp.c_fc.weight@crc32 || fail "deleting a crc32 attribute"
readers_refuse crcm "has no crc32 attribute (crcm/step-00000009/checkpoint.h5, /model/transformer.h.0.mlp.c_fc.weight)"
echo "ok: export and eval refuse a format-2 tensor without its crc32 attribute"

# The manifest: one flipped bit in consumed_samples' value (HDF5's metadata checksum; before, it
# loaded as another data position and silently skipped samples), a deleted config attribute.
# inspect and --resume exit 4 naming the damage; --resume auto falls back past it.
for damage in flip deleted; do
  rm -rf manifest && mkdir -p manifest/checkpoints
  cp -r $CKPT/step-00000008 $CKPT/step-00000009 manifest/checkpoints/
  echo step-00000009 > manifest/checkpoints/latest
  if [[ $damage == flip ]]; then
    flip_attribute_byte manifest/checkpoints/step-00000009/checkpoint.h5 consumed_samples 72
    why="checkpoint manifest cannot be read .*incorrect metadata checksum"
  else
    "$CHECKPOINT_CONFIG" manifest/checkpoints/step-00000009/checkpoint.h5 --delete config ||
      fail "deleting the config attribute"
    why="checkpoint manifest attribute config is missing (manifest/checkpoints/step-00000009/checkpoint.h5)"
  fi
  refused_as_damage manifest/checkpoints/step-00000009 "$why" "a $damage manifest"
  run_np 2 train "${COMMON[@]}" -o Engine.output_dir=manifest_run -o Checkpoint.dir=manifest/checkpoints \
    --resume auto > manifest_auto.log 2>&1 || { cat manifest_auto.log; fail "--resume auto past a $damage manifest"; }
  grep -q "resumed from manifest/checkpoints/step-00000008 at step 8 " manifest_auto.log ||
    { cat manifest_auto.log; fail "--resume auto did not fall back past a $damage manifest"; }
done
echo "ok: a damaged or incomplete manifest: inspect and --resume exit 4, --resume auto falls back"

# The only checkpoint is damaged: nothing to fall back to.
mkdir -p lonely && cp -r crc/step-00000009 lonely/ && echo step-00000009 > lonely/latest
set +e
run_np 2 train "${COMMON[@]}" -o Engine.output_dir=lonely_run -o Checkpoint.dir=lonely --resume auto \
  > lonely.out 2> lonely.err
rc=$?
set -e
[ $rc -eq 4 ] || { cat lonely.err; fail "every checkpoint damaged: exit $rc"; }
one_error_line lonely.err "no checkpoint verifies (lonely, Checkpoint.dir)"
echo "ok: with no good checkpoint left: $(grep 'error: ' lonely.err)"

# Another model shape: every differing key named.
set +e
run_np 2 train "${COMMON[@]}" -o Engine.output_dir=run -o Model.hidden_size=128 \
  -o Model.num_layers=3 --resume auto > shape.out 2> shape.err
rc=$?
set -e
[ $rc -eq 4 ] || { cat shape.err; fail "shape mismatch: exit $rc"; }
one_error_line shape.err "Model.hidden_size: checkpoint 64, config 128; Model.num_layers: checkpoint 2, config 3"
echo "ok: $(grep 'error: ' shape.err)"
# Another family or biases: the key named, not the tensors it leaves without a place.
for change in "Model.bias=false:Model.bias: checkpoint true, config false" \
              "Model.arch=llama:Model.arch: checkpoint gpt2, config llama"; do
  set +e
  run_np 2 train "${COMMON[@]}" -o Engine.output_dir=run -o "${change%%:*}" --resume auto \
    > family.out 2> family.err
  rc=$?
  set -e
  [ $rc -eq 4 ] || { cat family.err; fail "${change%%:*}: exit $rc"; }
  one_error_line family.err "checkpoint does not match the model in the config .*${change#*:}"
done
echo "ok: another family or biases name their keys"
# Model.bias shapes GPT-2's tensors only: a llama saved with bias=false resumes with the default.
LLAMA=(-c "$SRC/configs/tiny-llama-cpu.yaml" -o Data.train_path=data.h5 -o Data.val_fraction=0
       -o Model.num_layers=1 -o Model.max_seq_len=32 -o Engine.eval_freq=0 -o Engine.save_steps=1
       -o Engine.output_dir=llama_bias)
run_np 1 train "${LLAMA[@]}" -o Model.bias=false -o Engine.max_steps=1 > llama1.log 2>&1 ||
  { tail llama1.log; fail "llama with bias=false"; }
run_np 1 train "${LLAMA[@]}" -o Engine.max_steps=2 --resume auto > llama2.log 2>&1 ||
  { tail llama2.log; fail "a llama saved with bias=false did not resume with the default"; }

# Impossible progress (attributes outside the tensors' checksums): a negative step, more samples
# a step than a global batch holds, a step folder copied under another step's name. inspect says
# NO (exit 4) naming it, and --resume of it stops with exit 4 instead of an internal error.
mkdir progress
for case in step:-5 consumed_samples:1000000000000000 copy; do
  name=${case%%:*}
  rm -rf progress/* && cp -r $CKPT/step-00000009 progress/step-00000009
  folder=progress/step-00000009
  if [[ $name == copy ]]; then
    mv $folder progress/step-00000007 && folder=progress/step-00000007
    why="another step than its folder"
  else
    "$CHECKPOINT_CONFIG" $folder/checkpoint.h5 --set-int "$name" "${case#*:}" ||
      fail "setting $name"
    why=$([[ $name == step ]] && echo "a negative step" || echo "more samples a step than")
  fi
  refused_as_damage $folder "checkpoint progress is impossible .*$why" "$case"
done
echo "ok: impossible progress attributes are damage: inspect and --resume exit 4"

