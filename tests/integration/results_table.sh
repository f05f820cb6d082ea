#!/usr/bin/env bash
# bench/results_table.py on records whose table is known: the latest record per model, GPUs and
# layout (the last in the file; against a PyTorch script from outside bench/, a row of its own),
# memory from an earlier record of the same shape where the latest has none, the ratio's range over
# the records of one commit, --all, and --update / --check on a page with the table's markers (and
# README.md's compact table); then the repository's own records, and that docs/performance.md and
# README.md show their tables.
#   results_table.sh TRAINER SOURCE_DIR SCRATCH   (the trainer is not used)
set -euo pipefail
SRC=$2 DIR=$3
rm -rf "$DIR" && mkdir -p "$DIR"
rec() {  # rec DATE COMMIT HARDWARE MODEL LAYOUT B TOK MEMORY PEER_B PEER_TOK RATIO
  local mem=
  [ "$8" = - ] || mem=", \"memory_gib\": $8"
  echo "{\"date\": \"$1\", \"commit\": \"$2\", \"hardware\": \"$3\", \"model\": \"$4\", \"layout\": \"$5\", \"micro_batch\": $6, \"tokens_per_s\": $7, \"mfu\": 0.5$mem, \"peer\": {\"name\": \"PyTorch (bench/torch_gpt.py)\", \"micro_batch\": $9, \"tokens_per_s\": ${10}}, \"ratio\": ${11}}"
}
{
  rec 2026-01-01 aaaaaaa "1x GPU" "GPT 1.3B" "1 GPU" 16 900 77.0 16 800 1.125
  rec 2026-01-01 aaaaaaa "1x GPU" "GPT-2 124M" "1 GPU" 64 1000 30.0 64 900 1.111
  rec 2026-01-02 bbbbbbb "1x GPU" "GPT-2 124M" "1 GPU" 64 1100 - 64 1000 1.100
  rec 2026-01-03 bbbbbbb "1x GPU" "GPT-2 124M" "1 GPU" 64 1200 - 32 1000 1.200
  echo '{"date": "2026-01-03", "commit": "bbbbbbb", "hardware": "2x GPU", "model": "GPT-2 124M", "layout": "dp2 ZeRO-1", "micro_batch": 32, "tokens_per_s": 1900, "peer": {"name": "the trainer on 1 GPU", "micro_batch": 32, "tokens_per_s": 1000}, "ratio": 1.9}'
  rec 2026-01-04 ccccccc "1x GPU" "GPT 1.3B" "1 GPU" 16 950 - 16 700 1.357 |
    sed 's|bench/torch_gpt.py|../shared/torch_gpt.py|'
} > "$DIR/r.jsonl"
python3 "$SRC/bench/results_table.py" "$DIR/r.jsonl" > "$DIR/table.md"
cat "$DIR/table.md"
cat > "$DIR/expected.md" <<'EOF'
| model | GPUs | layout | micro-batch | tokens/s | MFU | memory | against | its tokens/s | ratio | commit | date |
| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
| GPT-2 124M | 1x GPU | 1 GPU | 64 | 1,200 | 50.0% | 30.0 GiB* | PyTorch, B=32 | 1,000 | **1.200** | bbbbbbb | 2026-01-03 |
| GPT 1.3B | 1x GPU | 1 GPU | 16 | 900 | 50.0% | 77.0 GiB | PyTorch, B=16 | 800 | **1.125** | aaaaaaa | 2026-01-01 |
| GPT 1.3B | 1x GPU | 1 GPU | 16 | 950 | 50.0% | - | PyTorch (../shared/torch_gpt.py), B=16 | 700 | **1.357** | ccccccc | 2026-01-04 |
| GPT-2 124M | 2x GPU | dp2 ZeRO-1 | 32 | 1,900 | - | - | 1 GPU | 1,000 | **1.900** | bbbbbbb | 2026-01-03 |

\* memory from the latest earlier record of the same model, layout and micro-batch.

The ratio over every record of the same commit: GPT-2 124M, 1 GPU: 1.100-1.200 (2 records).
EOF
diff "$DIR/expected.md" "$DIR/table.md" || { echo "FAIL: the table differs from the expected one"; exit 1; }
echo "ok: the latest record per row, memory from an earlier record, the ratio's range"
[ "$(python3 "$SRC/bench/results_table.py" --all "$DIR/r.jsonl" | grep -c '^| GPT')" = 6 ] ||
  { echo "FAIL: --all should print all 6 records"; exit 1; }
printf 'Intro\n\n<!-- results_table.py: begin -->\nold table\n<!-- results_table.py: end -->\n\nMore\n' > "$DIR/page.md"
if python3 "$SRC/bench/results_table.py" "$DIR/r.jsonl" --check "$DIR/page.md" 2> /dev/null; then
  echo "FAIL: --check passed a page with an old table"; exit 1
fi
python3 "$SRC/bench/results_table.py" "$DIR/r.jsonl" --update "$DIR/page.md"
python3 "$SRC/bench/results_table.py" "$DIR/r.jsonl" --check "$DIR/page.md"
{ printf 'Intro\n\n<!-- results_table.py: begin -->\n'; cat "$DIR/expected.md"
  printf '<!-- results_table.py: end -->\n\nMore\n'; } | diff - "$DIR/page.md" ||
  { echo "FAIL: --update wrote the page wrongly"; exit 1; }
printf '<!-- results_table.py --compact: begin -->\nold\n<!-- results_table.py: end -->\n' > "$DIR/readme.md"
python3 "$SRC/bench/results_table.py" "$DIR/r.jsonl" --update "$DIR/readme.md"
grep -qxF '| GPT-2 124M | 1x GPU | 1 GPU | 64 | 1,200 | 50.0% | **1.200**x PyTorch, B=32 |' "$DIR/readme.md" &&
  [ "$(grep -c '^| ' "$DIR/readme.md")" = 6 ] ||
  { echo "FAIL: the compact table:"; cat "$DIR/readme.md"; exit 1; }
echo "ok: --all, --update and --check, the full and the compact table"
echo '{"date": "2026-01-01", "model": "x"}' > "$DIR/bad.jsonl"
if python3 "$SRC/bench/results_table.py" "$DIR/bad.jsonl" 2> "$DIR/bad.err"; then
  echo "FAIL: a record without its fields was accepted"; exit 1
fi
grep -q "bad.jsonl:1: a record without hardware" "$DIR/bad.err" ||
  { echo "FAIL: the bad record's message: $(cat "$DIR/bad.err")"; exit 1; }
echo "ok: a record without its fields is named with its line"
python3 "$SRC/bench/results_table.py" > /dev/null
echo "ok: the repository's records (bench/results/gpu.jsonl) read"
python3 "$SRC/bench/results_table.py" --check "$SRC/docs/performance.md"
python3 "$SRC/bench/results_table.py" --check "$SRC/README.md"
echo "ok: docs/performance.md's and README.md's tables are the ones the records give"
