# The round trip of the Hugging Face tests (hf_llama.sh, hf_moe.sh; hf_training.sh takes
# hf_python only, hf_lora.sh hf_python and evaluate), sourced after lib.sh:
#   hf_python         $PY: TRAINER_HF_PYTHON, else hf_venv.sh's transformers 4.46.3 (exit 77,
#                     skipped, without one), offline and quiet
#   hf_setup HELPER   hf_python, text.txt packed as text.h5, T, COMMON (the run's -o keys on
#                     configs/tiny-llama-cpu.yaml) and evaluate
#   hf_round_trip CASE MIN TP [EXPORT_ARGS...] [-- CHECK_ARGS...]
#     HELPER make CASE hf-CASE (a tiny random model), `trainer inspect` for its -o Model.* keys
#     (at least MIN words: MODEL), a run from it at learning rate 0 whose `trainer eval` loss
#     HELPER check compares with transformers' (1e-5 relative), 4 training steps on TP ranks of 2,
#     `trainer export` (EXPORT_ARGS) and HELPER check of the export against trainer eval's loss of
#     the trained checkpoint. CHECK_ARGS go to both checks (--reference-only).
hf_python() {
  if [ -n "${TRAINER_HF_PYTHON:-}" ]; then PY=$TRAINER_HF_PYTHON
  else PY=$(bash "$SRC/tests/integration/hf_venv.sh") || exit $?; fi
  export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 TRANSFORMERS_VERBOSITY=error
}

hf_setup() {
  HELPER=$1
  hf_python
  word_text text.txt
  T=32
  COMMON=(-c "$SRC/configs/tiny-llama-cpu.yaml" -o Data.train_path=text.h5 -o Data.val_fraction=0
          -o Global.micro_batch_size=2 -o Global.global_batch_size=4 -o Engine.eval_freq=0
          -o Engine.logging_freq=1 -o Model.seq_len=$T)
}

evaluate() {  # checkpoints, output json
  "$TRAINER" eval "$1" --data text.h5 -b 1 --batches 2 > "$2" 2> "$2.err" ||
    { cat "$2" "$2.err"; fail "trainer eval $1"; }
}

hf_round_trip() {
  local case=$1 min=$2 tp=$3 export_args=() check_args=()
  shift 3
  while [ $# -gt 0 ] && [ "$1" != -- ]; do export_args+=("$1"); shift; done
  [ $# -gt 0 ] && shift && check_args=("$@")
  "$PY" "$HELPER" make "$case" "hf-$case" || fail "making the $case model"
  "$TRAINER" inspect "hf-$case" > "inspect-$case.txt" 2> "inspect-$case.err" ||
    { cat "inspect-$case.txt" "inspect-$case.err"; fail "inspect $case"; }
  read -ra MODEL <<< "$(sed -n 's/^  init_from needs  //p' "inspect-$case.txt")"
  [ "${#MODEL[@]}" -gt "$min" ] || { cat "inspect-$case.txt"; fail "inspect $case: no overrides"; }
  run_np 2 train "${COMMON[@]}" "${MODEL[@]}" -o Checkpoint.init_from="hf-$case" -o Optimizer.lr=0 \
    -o Optimizer.min_lr=0 -o Engine.max_steps=1 -o Engine.save_steps=1 \
    -o Engine.output_dir="init-$case" > "init-$case.log" 2>&1 ||
    { tail -20 "init-$case.log"; fail "init_from $case failed"; }
  grep -q "initial weights from .*Hugging Face" "init-$case.log" || fail "$case: init_from not said"
  evaluate "init-$case/checkpoints" "eval-init-$case.json"
  "$PY" "$HELPER" check "hf-$case" text.txt $T "eval-init-$case.json" "${check_args[@]}" ||
    fail "$case: the imported model's loss"
  run_np 2 train "${COMMON[@]}" "${MODEL[@]}" -o Checkpoint.init_from="hf-$case" \
    -o Optimizer.lr=1e-2 -o Optimizer.warmup_steps=0 -o Engine.max_steps=4 -o Engine.save_steps=4 \
    -o Distributed.tp_degree="$tp" -o Engine.output_dir="trained-$case" \
    > "trained-$case.log" 2>&1 ||
    { tail -20 "trained-$case.log"; fail "training $case failed"; }
  evaluate "trained-$case/checkpoints" "eval-trained-$case.json"
  cmp -s <(tail -1 "eval-init-$case.json") <(tail -1 "eval-trained-$case.json") &&
    fail "$case: training did not change the loss"
  "$TRAINER" export "trained-$case/checkpoints" --output "export-$case" "${export_args[@]}" \
    > "export-$case.log" || fail "export $case"
  "$PY" "$HELPER" check "export-$case" text.txt $T "eval-trained-$case.json" "${check_args[@]}" ||
    fail "$case: the exported model's loss"
}
