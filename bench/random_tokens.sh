# Sourced by the bench scripts: random_tokens NAME COUNT makes $WORK/NAME.h5 once, COUNT random
# GPT-2 token ids (uniform over 50257, Python's own generator seeded with 0, so no numpy), packed
# by $TRAINER. Every script that names the same file gets the same tokens. (No --force: the file
# is new here, and builds older than that flag, as bench/trainer_ab.sh may run, pack it too.)
random_tokens() {
  [ -f "$WORK/$1.h5" ] && return 0
  python3 -c "
import array, random, sys
rng = random.Random(0)
array.array('H', (rng.randrange(50257) for _ in range(int(sys.argv[2])))).tofile(open(sys.argv[1], 'wb'))" \
    "$WORK/$1.u16" "$2"
  "$TRAINER" pack --tokenizer u16 --vocab-size 50257 --input "$WORK/$1.u16" --output "$WORK/$1.h5" --quiet
  rm -f "$WORK/$1.u16"
}
