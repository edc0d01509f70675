#!/usr/bin/env bash
# Runs one libFuzzer target for ctest (see CMakeLists.txt):
#   run-fuzzer.sh <fuzzer> <libFuzzer flags and corpus folders...> --shared <default data root> <dirs...>
# The folders after --shared are relative to the shared test data, $KVSCOPE_TEST_DATA or, when
# unset, <default data root>; they are added as read-only seed folders when they exist (the
# fuzzer still runs from the committed seeds without them).
set -euo pipefail
fuzzer=$1
shift
args=()
while [ $# -gt 0 ] && [ "$1" != --shared ]; do
  args+=("$1")
  shift
done
if [ $# -gt 0 ]; then
  shift
  data="${KVSCOPE_TEST_DATA:-$1}"
  shift
  for rel in "$@"; do
    if [ -d "$data/$rel" ]; then
      args+=("$data/$rel")
    else
      echo "run-fuzzer: $data/$rel not found; fuzzing without those seeds"
    fi
  done
fi
exec "$fuzzer" "${args[@]}"
