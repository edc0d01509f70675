#!/usr/bin/env bash
# Trains kvscope's bundled demo model from scratch and writes resources/demo-model/.
#
# Corpus: the King James Bible (public domain) from Debian's bible-kjv package, one verse per
# line with the references stripped; Genesis..Jude for training, Revelation held out for the
# validation loss. Tokenizer: byte-level BPE trained on the training text. Model: a 4-layer
# Llama (GQA, SwiGLU, RoPE) trained with a fixed seed and a recall curriculum: a
# sequence-length warmup on 64-token windows, most of them a random segment repeated (where
# the previous-token and induction heads form), then full 256-token windows of mostly natural
# text with some repeated segments and renamed proper nouns (core/train/curriculum.h).
#
# Usage: packaging/train-demo-model.sh [BUILD_DIR] [OUTPUT_DIR]
#   BUILD_DIR   a configured build with kvscope-cli (default: build)
#   OUTPUT_DIR  where the model goes (default: resources/demo-model)
# Environment: KVSCOPE_THREADS (default 1: on a machine shared with compilers one thread ran
#   faster than two; the first steps' losses were identical with 1 and 2 threads),
#   DEMO_STEPS (default: the recipe's step count), WORK (scratch folder, default a temp dir).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
OUT="${2:-$ROOT/resources/demo-model}"
CLI="$BUILD/app/cli/kvscope-cli"
WORK="${WORK:-$(mktemp -d)}"
export KVSCOPE_THREADS="${KVSCOPE_THREADS:-1}"

# The recipe.
SEED=1234
VOCAB=4096
DIM=128
LAYERS=4
HEADS=4
KV_HEADS=1
FFN=352
CONTEXT=256
BATCH=8
STEPS="${DEMO_STEPS:-2400}"
LR=6e-3
MIN_LR=3e-4
WARMUP=50
SHORT_WINDOW=64
SHORT_WINDOW_STEPS=800
SHORT_WINDOW_SEGMENTS=0.7
SEGMENTS=0.3
RENAMES=0.15

if [ ! -x "$CLI" ]; then
    echo "no kvscope-cli at $CLI; build first (cmake --build $BUILD --target kvscope-cli)" >&2
    exit 1
fi
if ! command -v bible >/dev/null; then
    echo "installing bible-kjv (the corpus)" >&2
    if [ "$(id -u)" = 0 ]; then apt-get install -y bible-kjv; else sudo apt-get install -y bible-kjv; fi
fi

mkdir -p "$WORK"
echo "scratch folder: $WORK" >&2
# "Ge1:1 In the beginning ..." -> "In the beginning ..."
bible -f "Gen1:1-Jude1:25" | sed -E 's/^[1-3]?[A-Za-z]+[0-9]+:[0-9]+ //' > "$WORK/kjv-train.txt"
bible -f "Rev1:1-Rev22:21" | sed -E 's/^[1-3]?[A-Za-z]+[0-9]+:[0-9]+ //' > "$WORK/kjv-valid.txt"
wc -l -c "$WORK/kjv-train.txt" "$WORK/kjv-valid.txt" >&2

"$CLI" train-tokenizer --corpus "$WORK/kjv-train.txt" --vocab-size "$VOCAB" \
    --context "$CONTEXT" -o "$WORK/tokenizer/tokenizer.json"

mkdir -p "$OUT"
"$CLI" train --corpus "$WORK/kjv-train.txt" --valid "$WORK/kjv-valid.txt" \
    --tokenizer "$WORK/tokenizer/tokenizer.json" \
    --dim "$DIM" --layers "$LAYERS" --heads "$HEADS" --kv-heads "$KV_HEADS" --ffn "$FFN" \
    --context "$CONTEXT" --batch "$BATCH" --steps "$STEPS" --lr "$LR" --min-lr "$MIN_LR" \
    --warmup "$WARMUP" --seed "$SEED" \
    --short-window "$SHORT_WINDOW" --short-window-steps "$SHORT_WINDOW_STEPS" \
    --short-window-segment-fraction "$SHORT_WINDOW_SEGMENTS" \
    --segment-fraction "$SEGMENTS" --rename-fraction "$RENAMES" \
    --eval-every 100 --checkpoint-every 100 \
    --checkpoint-dir "$WORK/checkpoint" -o "$OUT" | tee "$WORK/train.log"

# A corpus sample for the tokenizer round-trip test (first 60 verses of the validation book).
head -n 60 "$WORK/kjv-valid.txt" > "$OUT/sample.txt"
echo "wrote $OUT (training log: $WORK/train.log)" >&2
