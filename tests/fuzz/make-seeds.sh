#!/usr/bin/env bash
# make-seeds.sh - regenerate the seed corpora tests/fuzz/corpus/<target>/
# from a fresh template store: bash tests/fuzz/make-seeds.sh BUILD_DIR
# (a build with the tests, where fuzz_make_seeds was built).  Crashers in
# tests/fuzz/crashers/ are never touched.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=${1:?usage: make-seeds.sh BUILD_DIR}
cmake --build "$build" --target fuzz_make_seeds
rm -rf "$here/corpus"
mkdir -p "$here/corpus"
"$build/tests/fuzz/fuzz_make_seeds" "$here/corpus"
for d in "$here"/corpus/*/; do
  echo "$(basename "$d"): $(ls "$d" | wc -l) seeds"
done
