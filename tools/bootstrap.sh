#!/usr/bin/env bash
# bootstrap.sh - set up a fresh Debian 12 machine and build kvflash, then
# run the demo or the tests.  Idempotent: packages already present are not
# reinstalled, an existing build directory is reused.
#
#   bash tools/bootstrap.sh demo            build, then run the main job:
#                                           a decode workload on a store in
#                                           ./kvflash-demo (KVF_DEMO_DIR),
#                                           replaced at every run
#   bash tools/bootstrap.sh test [SAN]      build, then run every test
#                                           (the Python package's pytest
#                                           suite and the examples too);
#                                           SAN = address (ASan+UBSan) or
#                                           thread (TSan), in build-SAN/
#   bash tools/bootstrap.sh mpi             build, then show a store
#                                           sharded over 4 MPI ranks
#                                           (demo_mpi) and measure it
#                                           over 1, 2 and 4 ranks
#                                           (kvbench_mpi); stores in
#                                           ./kvflash-mpi (KVF_MPI_DIR)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
jobs=$(nproc 2>/dev/null || echo 2)
packages=(gcc make cmake pkg-config binutils
          librocksdb-dev liblz4-dev libxxhash-dev liburing-dev libcriterion-dev
          python3 python3-numpy python3-torch python3-pytest
          libopenblas0-pthread gnuplot-nox
          libopenmpi-dev openmpi-bin python3-mpi4py)
# (libopenblas0-pthread: Debian's torch calls the system BLAS, which is the
# slow reference one unless OpenBLAS provides it; gnuplot-nox draws the
# plots of kvbench plan --plot and kvbench endurance --plot; Open MPI for
# the optional kvflash_mpi library, mpi/, and mpi4py for its Python module
# kvflash.mpi)

say() { printf '==> %s\n' "$*"; }

install_packages() {
  local missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
      missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    say "packages: all present (${packages[*]})"
    return
  fi
  local sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  say "packages: installing ${missing[*]}"
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq \
    --no-install-recommends "${missing[@]}"
}

# build DIR [cmake args...]
build() {
  local dir=$1; shift
  say "configure: $dir $*"
  cmake -S "$root" -B "$dir" -DKVF_WERROR=ON "$@" >/dev/null
  say "build: $dir ($jobs jobs)"
  cmake --build "$dir" -j "$jobs"
}

# remove_demo_dir DIR - remove what an earlier demo left at DIR (a store,
# or the files of `kvbench media`), so that the demo starts afresh;
# anything else there stops the script untouched
remove_demo_dir() {
  local d=$1 f
  [ -e "$d" ] || return 0
  if [ ! -f "$d/KVFLASH" ]; then
    for f in "$d"/* "$d"/.[!.]*; do
      [ -e "$f" ] || continue
      case ${f##*/} in
      LOCK|stripe*.kvf|plain.dat) ;;
      *) echo "bootstrap.sh: $d exists and is not a kvflash demo store; move it away or set KVF_DEMO_DIR" >&2
         exit 1 ;;
      esac
    done
  fi
  say "demo: removing the store of an earlier run in $d"
  rm -rf -- "$d"
}

cmd=${1:-}
case "$cmd" in
demo)
  install_packages
  build "$root/build"
  demo_dir=${KVF_DEMO_DIR:-$root/kvflash-demo}
  remove_demo_dir "$demo_dir"
  say "demo: a Llama-8B-shaped decode workload on a new store in $demo_dir"
  "$root/build/bench/kvbench" demo --dir "$demo_dir"
  # kvtool info arrives with the store's inspection commands; until then
  # the store is simply left for inspection
  if "$root/build/tools/kvtool" info --help >/dev/null 2>&1; then
    say "demo: kvtool info $demo_dir"
    "$root/build/tools/kvtool" info "$demo_dir"
  else
    say "demo: the store is left in $demo_dir (this kvtool has no 'info' yet)"
  fi
  ;;
test)
  san=${2:-}
  install_packages
  case "$san" in
  "") dir=$root/build ;;
  address|thread) dir=$root/build-$san ;;
  *) echo "bootstrap.sh: unknown sanitizer '$san' (address or thread)" >&2; exit 2 ;;
  esac
  build "$dir" -DKVF_SANITIZE="$san"
  say "test: ctest in $dir"
  ctest --test-dir "$dir" --output-on-failure -j "$jobs"
  ;;
mpi)
  install_packages
  build "$root/build"
  mpi_dir=${KVF_MPI_DIR:-$root/kvflash-mpi}
  # Open MPI refuses to start as root unless told that is intended
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  rm -rf -- "$mpi_dir/demo" "$mpi_dir/bench"
  mkdir -p "$mpi_dir"
  say "mpi: demo_mpi, head and token sharding over 4 ranks, in $mpi_dir/demo"
  mpirun -np 4 --oversubscribe "$root/build/mpi/demo_mpi" "$mpi_dir/demo"
  say "mpi: kvbench_mpi over 1, 2 and 4 ranks, in $mpi_dir/bench"
  mpirun -np 4 --oversubscribe "$root/build/mpi/kvbench_mpi" --dir "$mpi_dir/bench"
  ;;
*)
  echo "usage: bash tools/bootstrap.sh demo | test [address|thread] | mpi" >&2
  exit 2
  ;;
esac
