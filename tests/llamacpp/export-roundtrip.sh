#!/usr/bin/env bash
# kvscope's llama.cpp export checked by llama.cpp itself (CTest llamacpp_export, label llamacpp;
# optional). Snapshots of stories260K made by kvscope — a greedy run, the run truncated, a splice
# of two runs, and llama.cpp's own tim-dog state imported — are exported as ggsq files (f16 with
# plain and transposed V, f32), loaded by llama.cpp into a fresh context, fed the token kvscope
# would generate next, and continued 20 greedy tokens: each must equal `kvscope-cli continue`.
# Then the bundled demo model, written by `convert --to gguf`, runs in llama.cpp: three prompts
# must tokenize to the same ids and generate the same 40 greedy tokens as in kvscope.
#
# llama.cpp comes from the npm package node-llama-cpp (a development tool, never a dependency):
#   mkdir ~/nlc && cd ~/nlc && npm init -y && npm install node-llama-cpp@3.22.1
#   KVSCOPE_NODE_LLAMA_CPP=~/nlc ctest -L llamacpp
# Without it the test skips (exit 77) with this message.
set -euo pipefail
CLI="$1"
NODE_DIR="${KVSCOPE_NODE_LLAMA_CPP:-}"
if [ -z "$NODE_DIR" ] || [ ! -d "$NODE_DIR/node_modules/node-llama-cpp" ] ||
   ! command -v node >/dev/null 2>&1; then
  echo "SKIP: llama.cpp is not installed for this check; set KVSCOPE_NODE_LLAMA_CPP to a folder" \
       "holding node_modules/node-llama-cpp (npm install node-llama-cpp@3.22.1) and have node"
  exit 77
fi
HERE="$(cd "$(dirname "$0")" && pwd)"
DATA="${KVSCOPE_TEST_DATA:-$HERE/../../../shared}"
M="$DATA/models/stories260K/stories260K.gguf"
W="$(mktemp -d)"
trap 'rm -rf "$W"' EXIT
cp "$HERE/continue.mjs" "$W/"
ln -s "$(cd "$NODE_DIR" && pwd)/node_modules" "$W/node_modules" # ESM resolves from the script

json_field() { python3 -c "import json,sys; print(json.dumps(json.load(sys.stdin)['$1']))"; }
failed=0
check() { # snapshot, export flags, llama.cpp context options
  local snap="$1" flags="$2" opts="$3"
  "$CLI" export "$snap" --format llamacpp -o "$W/x.ggsq" $flags >/dev/null
  local ours pending theirs
  ours="$("$CLI" continue "$snap" -m "$M" -n 21 --temperature 0 --json | json_field tokens)"
  pending="$(python3 -c "import json; print(json.loads('$ours')[0])")"
  theirs="$(node "$W/continue.mjs" "$M" "$W/x.ggsq" "$pending" 20 "$opts" | json_field tokens)"
  if python3 -c "import json,sys; sys.exit(json.loads('$ours')[1:] != json.loads('$theirs'))"; then
    echo "ok    $(basename "$snap") $flags: llama.cpp continues $theirs"
  else
    echo "FAIL  $(basename "$snap") $flags: kvscope $ours, llama.cpp (after $pending) $theirs"
    failed=1
  fi
}

"$CLI" generate -m "$M" --prompt-ids 1,326,394,261,370 -n 20 --temperature 0 \
  --snapshot-out "$W/run.kvsnap" >/dev/null
"$CLI" generate -m "$M" --prompt-ids 1,291,262,379,286,270 -n 10 --temperature 0 \
  --snapshot-out "$W/other.kvsnap" >/dev/null
"$CLI" truncate "$W/run.kvsnap" --at 12 -m "$M" -o "$W/truncated.kvsnap" >/dev/null
"$CLI" splice "$W/run.kvsnap" --from "$W/other.kvsnap" --range 1:6 --at 5 -m "$M" \
  -o "$W/spliced.kvsnap" >/dev/null
"$CLI" import "$DATA/llamacpp/stories260K/tim-dog.ggsq" -m "$M" -o "$W/imported.kvsnap" >/dev/null

check "$W/run.kvsnap" "" '{}'
check "$W/run.kvsnap" "--transpose-v" '{"flashAttention": false}'
check "$W/run.kvsnap" "--key-type f32 --value-type f32" \
  '{"experimentalKvCacheKeyType": "F32", "experimentalKvCacheValueType": "F32"}'
check "$W/truncated.kvsnap" "" '{}'
check "$W/spliced.kvsnap" "" '{}'
check "$W/imported.kvsnap" "" '{}'
# The bundled demo model through `convert --to gguf`: llama.cpp must tokenize the prompts as
# kvscope does and generate the same greedy tokens.
"$CLI" convert -m "$HERE/../../resources/demo-model" --to gguf -o "$W/demo.gguf" >/dev/null
cp "$HERE/generate.mjs" "$W/"
for prompt in "And it came to pass" "In the beginning God created the heaven and the earth." \
              $'Verily, verily, I say unto thee: 12 tribes\n\tand 144,000 sealed!'; do
  ours="$("$CLI" generate -m "$W/demo.gguf" -p "$prompt" -n 40 --temperature 0 --json)"
  theirs="$(node "$W/generate.mjs" "$W/demo.gguf" "$prompt" 40)"
  if python3 - "$ours" "$theirs" "$prompt" <<'PY'
import json, sys
ours, theirs = json.loads(sys.argv[1]), json.loads(sys.argv[2])
ok = ours["prompt_tokens"] == theirs["prompt_tokens"] and ours["tokens"] == theirs["tokens"]
print(("ok    " if ok else "FAIL  ") + "demo.gguf %r: %d prompt tokens, llama.cpp %r" %
      (sys.argv[3], len(theirs["prompt_tokens"]), theirs["text"][:60]))
if not ok:
    print("      kvscope  ", ours["prompt_tokens"], ours["tokens"])
    print("      llama.cpp", theirs["prompt_tokens"], theirs["tokens"])
sys.exit(0 if ok else 1)
PY
  then :; else failed=1; fi
done
exit "$failed"
