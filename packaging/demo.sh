#!/usr/bin/env bash
# Installs what is missing, builds kvscope and opens it on a model.
# With a display: the kvscope GUI. Headless: a CLI demo (generate, snapshot, restore verdict,
# the induction probe).
# Usage (fresh Debian 12, as root): bash packaging/demo.sh [MODEL]
# MODEL defaults to the bundled demo model (resources/demo-model) when present, else
# ../shared/models/stories260K/stories260K.bin.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"

bash packaging/install-deps.sh
BUILD_DIR="${KVSCOPE_BUILD_DIR:-build-release}"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD_DIR" -j "$(nproc)"

MODEL="${1:-}"
# The bundled model knows the King James Bible; stories260K knows children's stories.
PROMPT="Once upon a time"
if [ -z "$MODEL" ]; then
  if [ -f resources/demo-model/config.json ]; then
    MODEL="$ROOT/resources/demo-model"
    PROMPT="And God said unto Moses"
  elif [ -f "${KVSCOPE_TEST_DATA:-../shared}/models/stories260K/stories260K.bin" ]; then
    MODEL="$(cd "${KVSCOPE_TEST_DATA:-../shared}" && pwd)/models/stories260K/stories260K.bin"
  else
    echo "demo: no model given, no bundled demo model and no ../shared/models; pass a model path" >&2
    exit 1
  fi
fi

CLI="$BUILD_DIR/app/cli/kvscope-cli"
GUI="$BUILD_DIR/app/gui/kvscope"
if [ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ] && [ -x "$GUI" ]; then
  echo "demo: opening the kvscope GUI on $MODEL"
  exec "$GUI" --model "$MODEL"
fi

if [ -x "$GUI" ]; then
  echo "demo: no display found (DISPLAY is not set): running the headless CLI demo instead"
else
  echo "demo: the GUI is not built in this tree: running the headless CLI demo"
fi
echo
echo "== kvscope-cli info"
"$CLI" info --model "$MODEL"
echo
echo "== kvscope-cli generate (greedy, 60 tokens)"
if "$CLI" --help | grep -q "inspect"; then
  SNAP="$(mktemp -d)/demo.kvsnap"
  "$CLI" generate --model "$MODEL" --prompt "$PROMPT" --steps 60 --temperature 0 \
    --snapshot-out "$SNAP"
  echo
  echo "== kvscope-cli verify (restore verdict for $SNAP)"
  "$CLI" verify "$SNAP" --model "$MODEL"
  echo
  echo "== kvscope-cli continue (40 more tokens from the restored state)"
  "$CLI" continue "$SNAP" --model "$MODEL" --steps 40
  echo
  echo "== kvscope-cli induction (does the model read its cache? a random segment fed twice)"
  "$CLI" induction --model "$MODEL" --length 32 --top 4
else
  "$CLI" generate --model "$MODEL" --prompt "$PROMPT" --steps 60 --temperature 0
fi
