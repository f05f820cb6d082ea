#!/usr/bin/env bash
# Each bad input (config, CLI, data, layout) ends every rank with a non-zero exit code and one
# clear line, within the time limit (a hang fails the test), under mpiexec with 2 ranks.
source "$(dirname "$0")/lib.sh"
make_small_dataset data.h5
printf 'Model:\n  hiden_size: 64\n' > typo.yaml
printf 'Model:\n  hidden_size: abc\n' > wrong_type.yaml
printf 'not an hdf5 file\n' > garbage.h5
SMALL=(-o Data.train_path=data.h5 -o Global.device=cpu -o Model.hidden_size=32
       -o Model.num_layers=2 -o Model.max_seq_len=32 -o Engine.max_steps=2 -o Engine.eval_freq=0)
checks=0
# expect NAME CODE PATTERN NP ARGS...: exit code CODE and exactly one error line on stderr, which
# says PATTERN.
expect() {
  local name=$1 code=$2 pattern=$3 np=$4; shift 4
  set +e
  run_np "$np" "$@" > "$name.out" 2> "$name.err"
  local rc=$?
  set -e
  [ $rc -ne 124 ] && [ $rc -ne 137 ] || fail "$name: hung (killed by the time limit)"
  [ $rc -eq "$code" ] || { cat "$name.err"; fail "$name: exit code $rc, expected $code"; }
  [ "$(grep -c 'error: ' "$name.err")" -eq 1 ] || { cat "$name.err"; fail "$name: not exactly one error line"; }
  grep 'error: ' "$name.err" | grep -q -- "$pattern" ||
    { cat "$name.err"; fail "$name: the error line does not say /$pattern/"; }
  checks=$((checks + 1))
  echo "ok: $name -> $rc: $(grep -m1 -- 'error' "$name.err")"
}
expect unknown_key 2 "Did you mean Model.hidden_size" 2 train -c typo.yaml "${SMALL[@]}"
expect wrong_type 2 "Model.hidden_size must be an integer" 2 train -c wrong_type.yaml
expect missing_config 2 "nonexistent.yaml" 2 train -c nonexistent.yaml
expect bad_override 2 "Engine.max_step" 2 train "${SMALL[@]}" -o Engine.max_step=3
expect bad_option 2 "unrecognised option\|unrecognized option" 2 train --no-such-option
expect layout_product 2 "world size" 2 train "${SMALL[@]}" -o Distributed.tp_degree=4
expect batch_divisible 2 "global_batch_size" 2 train "${SMALL[@]}" -o Global.global_batch_size=6 -o Global.micro_batch_size=4
expect seq_too_long 2 "max_seq_len" 2 train "${SMALL[@]}" -o Model.seq_len=64
expect heads_vs_tp 2 "num_heads" 2 train "${SMALL[@]}" -o Model.num_heads=3 -o Model.hidden_size=48 -o Distributed.tp_degree=2
expect missing_data 3 "missing.h5" 2 train "${SMALL[@]}" -o Data.train_path=missing.h5
expect not_hdf5 3 "garbage.h5" 2 train "${SMALL[@]}" -o Data.train_path=garbage.h5
expect vocab_too_small 3 "vocab" 2 train "${SMALL[@]}" -o Model.vocab_size=200
expect data_too_short 3 "data.h5" 2 train "${SMALL[@]}" -o Model.max_seq_len=2048 -o Global.global_batch_size=512 -o Global.micro_batch_size=1
# A model far beyond any host's memory (51.5B parameters, ~1 TB on each rank in fp32): stopped
# before anything large is allocated, naming the need, the memory and the way out.
expect too_big_for_memory 2 "memory (rank 0 on .*): a rank of pipeline stage 0 needs ~[0-9.]* [GT]iB .* [Ss]pread the model over more ranks" \
  2 train "${SMALL[@]}" -o Model.hidden_size=8192 -o Model.num_layers=64 -o Model.num_heads=64
# The same model with its optimizer offloaded: the host's free memory cannot hold the offloaded
# state (12 B/param) beside the arena, and says so before allocating it.
expect offload_too_big_for_host 2 "memory (rank 0 on .*): sharding_offload keeps ~[0-9.]* [GT]iB .*sharding_offload=false" \
  2 train "${SMALL[@]}" -o Model.hidden_size=8192 -o Model.num_layers=64 -o Model.num_heads=64 \
  -o Distributed.sharding.sharding_offload=true
expect unknown_command 2 "unknown command" 1 frobnicate
# A config file without -c: refused, not trained on the built-in defaults.
expect stray_argument 2 "unexpected argument '$SRC/configs/tiny-cpu.yaml' (trainer train, command line).*Did you mean -c " \
  2 train "$SRC/configs/tiny-cpu.yaml" "${SMALL[@]}"
# --print-config prints a config that -c reads back into the same run.
run_np 2 train -c "$SRC/configs/tiny-cpu.yaml" "${SMALL[@]}" --print-config > printed.yaml 2> printed.err ||
  { cat printed.err; fail "--print-config"; }
run_np 2 train -c printed.yaml --print-config > reprinted.yaml 2> reprinted.err ||
  { cat reprinted.err; fail "the printed config does not load back with -c"; }
diff printed.yaml reprinted.yaml || fail "the printed config loads back as another config"
echo "ok: --print-config loads back with -c as the same config"
# A huge micro-batch: refused at once, by the memory check or for overflowing a matrix dimension.
SECONDS=0
expect huge_micro_batch 2 "needs ~[0-9.]* [GT]iB at Global.micro_batch_size=1000000 .* Set Global.micro_batch_size=" \
  1 train "${SMALL[@]}" -o Global.micro_batch_size=1000000 -o Global.global_batch_size=1000000
expect overflowing_micro_batch 2 "tokens per micro-batch, more than 2147483647" \
  1 train "${SMALL[@]}" -o Global.micro_batch_size=2147483647 -o Global.global_batch_size=2147483647
[ "$SECONDS" -le 20 ] || fail "the huge micro-batches took $SECONDS s to refuse"
# Evaluation without validation data: found before step 1, not at the first evaluation.
expect no_val_data 3 "no validation data (Data.val_path, Data.val_fraction, Engine.eval_freq)" \
  2 train "${SMALL[@]}" -o Engine.eval_freq=1
! grep -q "^step " no_val_data.out || fail "no_val_data: trained before refusing"
if ! nvidia-smi -L > /dev/null 2>&1; then  # a GPU asked for where there is none
  expect no_gpu 5 "no GPU is visible\|built without CUDA" 2 train "${SMALL[@]}" -o Global.device=cuda
fi
expect resume_missing 4 "does not exist" 2 train "${SMALL[@]}" --resume nowhere/step-00000001
# --resume's path is taken as given, not as YAML: " #" is not a comment, "~" and "null" not null.
expect resume_hash 4 "no checkpoint at nowhere #old (--resume or Checkpoint.resume): it does not exist" \
  2 train "${SMALL[@]}" --resume "nowhere #old"
expect resume_tilde 4 "no checkpoint at ~ (--resume or Checkpoint.resume): it does not exist" 2 train "${SMALL[@]}" --resume "~"
expect resume_null 4 "no checkpoint at null (--resume or Checkpoint.resume): it does not exist" 2 train "${SMALL[@]}" --resume null
# The same key set in the config: its line names both ways of setting it.
expect resume_config 4 "no checkpoint at yes (--resume or Checkpoint.resume): it does not exist" \
  2 train "${SMALL[@]}" -o Checkpoint.resume=yes
# A config file of two YAML documents: refused, naming the second's line.
printf 'Data:\n  train_path: data.h5\n---\nEngine:\n  max_steps: 1\n' > two_documents.yaml
expect two_documents 2 "more than one YAML document (two_documents.yaml line 4" 2 train -c two_documents.yaml
# A padded vocabulary past int32: one line, not an overflowed size.
expect vocab_overflow 2 "padded vocabulary 2147483648 .* is more than 2147483647" \
  2 train "${SMALL[@]}" -o Model.vocab_size=2147483647
# Folders the run cannot write: refused before step 1, in one line (no warning before it).
touch not_a_folder
expect unwritable_checkpoint_dir 4 "checkpoint folder not writable (not_a_folder/ckpt, Checkpoint.dir, rank 0 on .*): cannot create folder not_a_folder/ckpt: Not a directory" \
  2 train "${SMALL[@]}" -o Checkpoint.dir=not_a_folder/ckpt
expect unwritable_output_dir 2 "output folder not writable (not_a_folder/out, Engine.output_dir, rank 0 on .*): cannot create folder not_a_folder/out: Not a directory" \
  2 train "${SMALL[@]}" -o Engine.output_dir=not_a_folder/out
for name in unwritable_checkpoint_dir unwritable_output_dir; do
  ! grep -q "^step \|warning" $name.out $name.err || { cat $name.out $name.err; fail "$name: trained or warned"; }
done
# A dataset where a checkpoint is expected: named as such (not HDF5's locking message), exit 4.
expect dataset_as_resume 4 "not a checkpoint (data.h5): it is a packed-token dataset" \
  2 train "${SMALL[@]}" --resume data.h5
expect dataset_as_init_from 4 "not a checkpoint (data.h5): it is a packed-token dataset" \
  2 train "${SMALL[@]}" -o Checkpoint.init_from=data.h5
echo "$checks bad inputs rejected with one clear line"
