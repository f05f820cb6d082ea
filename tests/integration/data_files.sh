#!/usr/bin/env bash
# Data.train_path naming several files (a glob, or commas): their samples form one set, so a run
# on shards A and B equals a run on one file C that holds the same samples in the same order. The
# files are built so that it does: A = a + eod and B = eod + b + eod (u16 token files, one document
# each, `trainer pack` appending the eod), C = a + eod + b + eod, where a holds nA*T tokens and b
# nB*T - 1; then C's samples are A's followed by B's, token for token. Checked: one rank on A,B
# gives C's losses and validation losses exactly (the held-out samples are B's last ones); DP=2 on
# the glob gives them within reduction-order rounding; files packed with another tokenizer, or a
# pattern that matches nothing, stop the run with one line (exit 3); so do ranks whose one config
# finds different files, and ranks started with different configs (exit 2, the rank and the key).
source "$(dirname "$0")/lib.sh"
T=64
python3 - "$T" <<'PY'
import random, struct, sys
T = int(sys.argv[1])
rng = random.Random(5)
n_a, n_b, eod = 23, 17, 256
text = lambda n: [rng.randrange(256) for _ in range(n)]
a = text(n_a * T)
b = [eod] + text(n_b * T - 1)
for name, tokens in (("a.u16", a), ("b.u16", b), ("c.u16", a + b)):
    open(name, "wb").write(struct.pack(f"<{len(tokens)}H", *tokens))
PY
mkdir shards
for f in a b; do
  "$TRAINER" pack --tokenizer u16 --vocab-size 257 --input $f.u16 --output shards/$f.h5 --quiet
done
"$TRAINER" pack --tokenizer u16 --vocab-size 257 --input c.u16 --output c.h5 --quiet

COMMON=(-c "$SRC/configs/tiny-cpu.yaml" -o Model.max_seq_len=$T -o Model.num_layers=2
        -o Engine.max_steps=24 -o Engine.logging_freq=4 -o Engine.eval_freq=8 -o Engine.eval_iters=1
        -o Engine.save_steps=0 -o Data.val_fraction=0.1)
run_np 1 train "${COMMON[@]}" -o Data.train_path=c.h5 -o Engine.output_dir=one_file > one.log 2>&1 ||
  { tail -5 one.log; fail "run on c.h5 failed"; }
run_np 1 train "${COMMON[@]}" -o "Data.train_path=shards/a.h5, shards/b.h5" \
  -o Engine.output_dir=two_files > two.log 2>&1 || { tail -5 two.log; fail "run on a.h5,b.h5 failed"; }
grep -q "2 files: shards/a.h5, shards/b.h5" two.log || { cat two.log; fail "the run does not name its two files"; }
val_losses() { grep -o '"val_loss": [^,}]*' "$1" | awk '{print $2}'; }
[ -n "$(losses one_file/metrics.jsonl)" ] && [ "$(losses one_file/metrics.jsonl)" = "$(losses two_files/metrics.jsonl)" ] ||
  { paste <(losses one_file/metrics.jsonl) <(losses two_files/metrics.jsonl); fail "losses on A,B differ from C's"; }
[ -n "$(val_losses one_file/metrics.jsonl)" ] &&
  [ "$(val_losses one_file/metrics.jsonl)" = "$(val_losses two_files/metrics.jsonl)" ] ||
  fail "validation losses on A,B differ from C's"
echo "one rank: $(losses one_file/metrics.jsonl | wc -l) losses and $(val_losses one_file/metrics.jsonl | wc -l) validation losses equal"
run_np 2 train "${COMMON[@]}" -o 'Data.train_path=shards/*.h5' -o Engine.output_dir=dp2 > dp2.log 2>&1 ||
  { tail -5 dp2.log; fail "DP=2 run on shards/*.h5 failed"; }
compare_curves dp2/metrics.jsonl one_file/metrics.jsonl 1e-5 1e-5 7 || fail "DP=2 on the glob drifts from one rank on C"

# trainer eval of two files gives the loss of the one file holding the same samples.
run_np 1 train "${COMMON[@]}" -o Data.train_path=c.h5 -o Engine.save_steps=24 \
  -o Engine.output_dir=saved > saved.log 2>&1 || { tail -5 saved.log; fail "run with a save failed"; }
eval_loss() { "$TRAINER" eval saved/checkpoints --data "$1" -b 4 2> /dev/null | tail -1 |
  grep -o '"loss": [^,}]*'; }
[ -n "$(eval_loss c.h5)" ] && [ "$(eval_loss c.h5)" = "$(eval_loss 'shards/a.h5,shards/b.h5')" ] ||
  fail "trainer eval on a.h5,b.h5 ($(eval_loss 'shards/a.h5,shards/b.h5')) differs from c.h5 ($(eval_loss c.h5))"

# Data.train_weights: weight 2 on A visits each of A's samples twice an epoch, exactly as listing A
# twice does; weights 1,1 change nothing.
NOVAL=(-o Data.val_fraction=0 -o Engine.eval_freq=0)
run_np 1 train "${COMMON[@]}" "${NOVAL[@]}" -o Data.train_path=shards/a.h5 -o Data.train_weights=2 \
  -o Engine.output_dir=weight2 > weight2.log 2>&1 || { tail -5 weight2.log; fail "run with weight 2 failed"; }
grep -q "46 an epoch by Data.train_weights 2" weight2.log || { grep "^data" weight2.log; fail "the run does not say its weighted epoch"; }
run_np 1 train "${COMMON[@]}" "${NOVAL[@]}" -o Data.train_path=shards/a.h5,shards/a.h5 \
  -o Engine.output_dir=twice > twice.log 2>&1 || { tail -5 twice.log; fail "run on a.h5 twice failed"; }
[ -n "$(losses weight2/metrics.jsonl)" ] && [ "$(losses weight2/metrics.jsonl)" = "$(losses twice/metrics.jsonl)" ] ||
  fail "weight 2 on a.h5 differs from a.h5 listed twice"
run_np 1 train "${COMMON[@]}" "${NOVAL[@]}" -o Data.train_path=shards/a.h5,shards/b.h5 \
  -o Data.train_weights=1,1 -o Engine.output_dir=ones > ones.log 2>&1 || { tail -5 ones.log; fail "run with weights 1,1 failed"; }
run_np 1 train "${COMMON[@]}" "${NOVAL[@]}" -o Data.train_path=shards/a.h5,shards/b.h5 \
  -o Engine.output_dir=plain > plain.log 2>&1 || { tail -5 plain.log; fail "run on a.h5,b.h5 failed"; }
[ -n "$(losses plain/metrics.jsonl)" ] && [ "$(losses ones/metrics.jsonl)" = "$(losses plain/metrics.jsonl)" ] ||
  fail "weights 1,1 change the run"
expect_error 2 "Data.train_weights has 1 weights for the 2 entries" run_np 2 train "${COMMON[@]}" \
  -o Data.train_path=shards/a.h5,shards/b.h5 -o Data.train_weights=3 -o Engine.output_dir=bad_weights
expect_error 2 "Data.train_weights (1,1e18) make an epoch of .* samples, beyond the" run_np 2 train \
  "${COMMON[@]}" -o Data.train_path=shards/a.h5,shards/b.h5 -o Data.train_weights=1,1e18 \
  -o Engine.output_dir=huge_weights
# A weight on an entry that the held-out tail takes whole does nothing: one warning (rank 0).
run_np 2 train "${COMMON[@]}" -o Data.train_path=shards/a.h5,shards/b.h5 -o Data.train_weights=1,2 \
  -o Data.val_fraction=0.6 -o Engine.max_steps=1 -o Engine.output_dir=held_weights > held.log 2>&1 ||
  { cat held.log; fail "weights with B held out"; }
[[ $(grep -c "warning: Data.train_weights: entry 2 of Data.train_path (shards/b.h5) has no training samples" held.log) -eq 1 ]] ||
  { cat held.log; fail "no single warning for the weight of a held-out entry"; }
echo "weights: 2 on A equals A listed twice, 1,1 equals none; too large refused; held out warned"

"$TRAINER" inspect 'shards/*.h5' > inspect.txt || fail "trainer inspect of the shards failed"
grep -q "^data set (2 files" inspect.txt && grep -q "^  tokens         2562$" inspect.txt &&
  grep -q "^  samples        T=128: 19, T=1024: 2 (none across files)$" inspect.txt ||
  { cat inspect.txt; fail "trainer inspect 'shards/*.h5' does not sum the shards"; }

# Ranks whose one config finds different files (two app contexts of one mpirun in folders that
# stand for two hosts: the glob matches one shard on the first, two on the second) stop with one
# line, rank 1's (the rank that differs).
mkdir -p hostA/shards hostB/shards && cp shards/a.h5 hostA/shards/ && cp shards/*.h5 hostB/shards/
rc=0
timeout --kill-after=5 120 "$MPIEXEC" \
  --oversubscribe --bind-to none -n 1 -wdir hostA "$TRAINER" train "${COMMON[@]}" \
  -o 'Data.train_path=shards/*.h5' -o Engine.output_dir=unlike : -n 1 -wdir hostB "$TRAINER" train \
  "${COMMON[@]}" -o 'Data.train_path=shards/*.h5' -o Engine.output_dir=unlike > hosts.log 2>&1 || rc=$?
[[ $rc -eq 3 && $(grep -c "error: " hosts.log) -eq 1 ]] || { cat hosts.log; fail "other files on rank 1: exit $rc"; }
grep -q "^\[rank 1 [^]]*\] error: rank 1 sees other data than rank 0 (Data.train_path shards/\*.h5): training 36 samples in 2 files (CRC-32 [0-9a-f]*); validation 4 samples held out here, training 21 samples in 1 files" hosts.log ||
  { cat hosts.log; fail "other files on rank 1: not rank 1's line"; }
# Ranks started with different configs stop before anything else, with the rank and the key.
rc=0
timeout --kill-after=5 120 "$MPIEXEC" --oversubscribe --bind-to none -n 1 "$TRAINER" train \
  "${COMMON[@]}" -o Data.train_path=shards/a.h5 -o Engine.output_dir=unlike : -n 1 "$TRAINER" train \
  "${COMMON[@]}" -o Data.train_path=shards/a.h5,shards/b.h5 -o Model.num_layers=1 \
  -o Engine.output_dir=unlike > unlike.log 2>&1 || rc=$?
[[ $rc -eq 2 && $(grep -c 'error: ' unlike.log) -eq 1 ]] && grep -q "^\[rank 1 [^]]*\] error: rank 1 loaded another config than rank 0 ([^)]*): Model.num_layers: 1 here, 2 on rank 0 (and 1 more key)" unlike.log ||
  { cat unlike.log; fail "ranks with different configs: exit $rc"; }
[[ ! -e unlike ]] || fail "ranks with different configs made their output folder"

"$TRAINER" pack --input "$SRC/README.md" --output shards/text.h5 --quiet  # bytes, not u16
expect_error 3 "files packed differently" "$TRAINER" inspect 'shards/*.h5' 
expect_error 3 "packed differently" run_np 2 train "${COMMON[@]}" -o 'Data.train_path=shards/*.h5' \
  -o Engine.output_dir=mixed
expect_error 3 "no file matches" run_np 2 train "${COMMON[@]}" -o 'Data.train_path=shards/x*.h5' \
  -o Engine.output_dir=none
# slurm/pack.sbatch (outside an array: task 0) with --val-fraction writes the held-out part as
# val-00000.h5, which the training glob shard-*.h5 cannot match; pack's default name for it,
# shard-00000.val.h5, would be matched, and a run that trains on a Data.val_path file is refused.
TRAINER_BIN="$TRAINER" bash "$SRC/slurm/pack.sbatch" "$SRC/docs/*.md" sbatch --val-fraction 0.1 \
  > sbatch.log 2>&1 || { cat sbatch.log; fail "pack.sbatch with --val-fraction failed"; }
[ -f sbatch/shard-00000.h5 ] && [ -f sbatch/val-00000.h5 ] && [ ! -e sbatch/shard-00000.val.h5 ] ||
  { ls sbatch; fail "pack.sbatch: expected shard-00000.h5 and val-00000.h5"; }
"$TRAINER" pack --input "$SRC/docs/"*.md --output sbatch/shard-00001.h5 --val-fraction 0.1 --quiet
expect_error 3 "training file is also a validation file (sbatch/shard-00001.val.h5, Data.train_path" \
  run_np 2 train "${COMMON[@]}" -o Model.vocab_size=257 -o 'Data.train_path=sbatch/shard-*.h5' \
  -o 'Data.val_path=sbatch/val-*.h5,sbatch/shard-00001.val.h5' -o Engine.output_dir=overlap
echo "pack.sbatch: validation shards named apart; a training glob over a validation file refused"
echo "data_files: all checks passed"
