#!/usr/bin/env bash
# fuzz.sh - build the fuzz targets with clang and libFuzzer (ASan + UBSan)
# in their own build directory, and run each for a while.
#
#   bash tests/fuzz/fuzz.sh [SECONDS] [TARGET...]
#
# SECONDS per target (default 60; KVF_FUZZ_SECONDS too); TARGET names
# (store_header syncmark summary catalog kvtool flash_image seqfile; default
# all).  The build goes to build-fuzz/ (KVF_FUZZ_BUILD); each run starts
# from the seed corpus tests/fuzz/corpus/TARGET/ and the crashers kept,
# grows its own corpus in build-fuzz/corpus/TARGET/ (the seeds are never
# changed), and writes a crashing input to tests/fuzz/crashers/TARGET/ so
# that it is kept in the repository and replayed by ctest (fuzz_TARGET)
# from then on.
# Runs under nice, one target at a time.  Prints executions and findings.
# Needs clang and its libFuzzer runtime: Debian's clang-14 and
# libclang-rt-14-dev, installed here when missing.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
here=$root/tests/fuzz
build=${KVF_FUZZ_BUILD:-$root/build-fuzz}
secs=${1:-${KVF_FUZZ_SECONDS:-60}}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(store_header syncmark summary catalog kvtool flash_image seqfile)
packages=(gcc make cmake pkg-config binutils clang-14 libclang-rt-14-dev
          librocksdb-dev liblz4-dev libxxhash-dev liburing-dev libcriterion-dev)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
    missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  echo "==> packages: installing ${missing[*]}"
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq \
    --no-install-recommends "${missing[@]}"
fi

san="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
echo "==> configure: $build (clang-14, libFuzzer, ASan + UBSan)"
# scalar kernels only: clang-14 has no __builtin_cpu_supports("f16c"), which
# compute/dispatch.c asks for, and no parser is in the kernels
cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER=clang-14 -DKVF_FUZZ=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS="$san" \
  -DKVF_CC_MF16C=OFF >/dev/null
echo "==> build: ${targets[*]}"
cmake --build "$build" -j 2 --target "${targets[@]/#/fuzz_}"

status=0
for t in "${targets[@]}"; do
  corpus=$build/corpus/$t
  crashers=$here/crashers/$t
  mkdir -p "$corpus" "$crashers"
  log=$build/fuzz_$t.log
  # the template stores go here (libFuzzer exits without atexit handlers)
  export KVF_TEST_DIR=$build/tmp
  rm -rf "$KVF_TEST_DIR" && mkdir -p "$KVF_TEST_DIR"
  echo "==> fuzz_$t: $secs s (log $log)"
  # libFuzzer's leak check runs per input; a finding stops the run
  set +e
  nice -n 10 "$build/tests/fuzz/fuzz_$t" -max_total_time="$secs" \
    -print_final_stats=1 -timeout=30 -rss_limit_mb=2048 \
    -close_fd_mask=1 -artifact_prefix="$crashers/" \
    "$corpus" "$here/corpus/$t" "$crashers" >"$log" 2>&1
  rc=$?
  set -e
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)
  if [ $rc -eq 0 ]; then
    echo "    $t: ${execs:-?} executions (${rate:-?}/s), ${cov:-cov: ?}, no finding"
  else
    status=1
    echo "    $t: FINDING after ${execs:-?} executions; input saved in $crashers/:"
    grep -E '^(==[0-9]+==ERROR|SUMMARY|fuzz:|.*runtime error)' "$log" |
      head -5 | sed 's/^/      /' || true
  fi
  rm -rf "$KVF_TEST_DIR"
done
exit $status
