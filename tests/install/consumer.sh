#!/bin/bash
# consumer.sh - install kvflash into a scratch prefix and build a small
# outside project against it in the four ways a user would: the CMake
# package (kvflash::kvflash, kvflash::kvflash_static) and pkg-config
# (shared, and static with --static).  Each program is run and must pass
# its checks; each is checked to link the kind of library it asked for,
# from the scratch prefix and not from the build tree or a system copy.
#
# Usage: tests/install/consumer.sh KVFLASH_BUILD_DIR TESTS_INSTALL_DIR
#
# The sanitizer setting of the kvflash build (KVF_SANITIZE in its
# CMakeCache.txt) is applied to the consumer too: objects built with ASan
# cannot be linked into, or loaded by, a program built without it.
# Everything happens in one temporary directory, removed at exit.  Exit
# status: 0 all passed, 1 a step failed (the message names it), 2 usage.
set -u

if [ $# -ne 2 ] || [ ! -f "$1/CMakeCache.txt" ] ||
   [ ! -f "$2/consumer/CMakeLists.txt" ]; then
	echo "usage: $0 KVFLASH_BUILD_DIR TESTS_INSTALL_DIR" >&2
	exit 2
fi
build=$(cd "$1" && pwd -P)
src=$(cd "$2" && pwd -P)/consumer
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvflash-consumer.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

say() {
	echo "consumer: $*"
}

die() {
	echo "consumer: FAIL: $*" >&2
	exit 1
}

# quietly STEP CMD... - run CMD; show its output only if it fails
quietly() {
	local step=$1
	shift
	if ! "$@" >"$tmp/log" 2>&1; then
		tail -n 30 "$tmp/log" | sed 's/^/  | /' >&2
		die "$step: $*"
	fi
}

cache() {
	sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"
}

cc=$(cache CMAKE_C_COMPILER)
[ -n "$cc" ] || cc=cc
case $(cache KVF_SANITIZE) in
address) san="-fsanitize=address,undefined -fno-sanitize-recover=all" ;;
thread) san="-fsanitize=thread" ;;
*) san="" ;;
esac

# ---- install ---------------------------------------------------------------

say "installing $build into $prefix"
quietly "cmake --install" cmake --install "$build" --prefix "$prefix"
pc=$(find "$prefix" -name kvflash.pc -path '*/pkgconfig/*' | head -n 1)
[ -n "$pc" ] || die "no kvflash.pc installed under $prefix"
libdir=$(dirname "$(dirname "$pc")")
for f in include/kvflash.h bin/kvtool bin/kvbench; do
	[ -e "$prefix/$f" ] || die "$f not installed"
done
for f in libkvflash.a libkvflash.so; do
	[ -e "$libdir/$f" ] || die "${libdir#"$prefix"/}/$f not installed"
done
[ -f "$libdir/cmake/kvflash/kvflash-config.cmake" ] ||
	die "no CMake package at ${libdir#"$prefix"/}/cmake/kvflash"
[ -f "$prefix/share/man/man1/kvtool.1" ] || die "kvtool.1 not installed"
say "installed: header, libraries, kvtool, kvbench, kvflash.pc, CMake package, man page"

# links_to PROGRAM - the libkvflash.so PROGRAM loads, as ldd resolves it
links_to() {
	ldd "$1" | awk '/libkvflash\.so/ { print $3 }'
}

# expect_shared PROGRAM - loads libkvflash.so, and the installed one
expect_shared() {
	local got
	got=$(links_to "$1")
	[ -n "$got" ] || die "$1 does not load libkvflash.so"
	case $(realpath "$got") in
	"$(realpath "$libdir")"/*) ;;
	*) die "$1 loads $got, not the copy installed in $libdir" ;;
	esac
}

# expect_static PROGRAM - does not need libkvflash.so at all
expect_static() {
	if readelf -d "$1" | grep -q 'NEEDED.*libkvflash'; then
		die "$1 should link libkvflash statically but needs the .so"
	fi
}

run_consumer() {
	local out
	out=$("$@" 2>&1) || die "$* failed: $out"
	case $out in
	"consumer: kvflash "*" OK") ;;
	*) die "$* printed '$out'" ;;
	esac
}

# ---- installed kvtool runs from the prefix ---------------------------------

ver=$(env -u LD_LIBRARY_PATH "$prefix/bin/kvtool" --version 2>&1) ||
	die "installed kvtool does not run: $ver"
expect_shared "$prefix/bin/kvtool"
say "installed kvtool runs: $ver"

# ---- CMake package ---------------------------------------------------------

for kind in shared static; do
	flag=OFF
	[ $kind = static ] && flag=ON
	say "CMake: find_package(kvflash), $kind library"
	quietly "configure the $kind consumer" cmake -S "$src" \
		-B "$tmp/cmake-$kind" -DCMAKE_PREFIX_PATH="$prefix" \
		-DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="$san" \
		-DKVF_CONSUMER_STATIC=$flag
	quietly "build the $kind consumer" cmake --build "$tmp/cmake-$kind"
	exe=$tmp/cmake-$kind/consumer
	if [ $kind = shared ]; then expect_shared "$exe"; else expect_static "$exe"; fi
	run_consumer env -u LD_LIBRARY_PATH "$exe"
done

# ---- pkg-config ------------------------------------------------------------

export PKG_CONFIG_PATH="$libdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
inc=$(pkg-config --variable=includedir kvflash) ||
	die "pkg-config does not find kvflash.pc in $libdir/pkgconfig"
case $(realpath -m "$inc") in
"$(realpath "$prefix")"/*) ;;
*) die "kvflash.pc points at $inc, not at the prefix it was installed into ($prefix); it should be relocatable: prefix=\${pcfiledir}/<path up to the prefix>" ;;
esac
[ -f "$inc/kvflash.h" ] || die "kvflash.pc: no kvflash.h in $inc"

say "pkg-config: shared library"
# shellcheck disable=SC2046,SC2086
quietly "cc with pkg-config --cflags --libs kvflash" \
	"$cc" -std=c11 -Wall -Wextra -Wpedantic -Werror $san \
	-o "$tmp/pc-shared" "$src/consumer.c" \
	$(pkg-config --cflags --libs kvflash)
LD_LIBRARY_PATH="$libdir" expect_shared "$tmp/pc-shared"
run_consumer env LD_LIBRARY_PATH="$libdir" "$tmp/pc-shared"

say "pkg-config --static: static library"
libs=$(pkg-config --static --libs kvflash) ||
	die "pkg-config --static --libs kvflash failed"
# -lkvflash would pick the .so next to the .a; name the archive instead
libs=${libs/-lkvflash/-l:libkvflash.a}
# shellcheck disable=SC2046,SC2086
quietly "cc with pkg-config --static" \
	"$cc" -std=c11 -Wall -Wextra -Wpedantic -Werror $san \
	-o "$tmp/pc-static" "$src/consumer.c" \
	$(pkg-config --static --cflags kvflash) $libs
expect_static "$tmp/pc-static"
run_consumer env -u LD_LIBRARY_PATH "$tmp/pc-static"

# ---- the header from C++ -----------------------------------------------------

if command -v c++ >/dev/null 2>&1; then
	say "the public header compiles as C++"
	quietly "c++ -fsyntax-only kvflash.h" c++ -std=c++11 -Wall -Wextra \
		-Wpedantic -Werror -fsyntax-only -x c++ "$inc/kvflash.h"
fi

# ---- the Python package -------------------------------------------------------

py=$(sed -n 's/^KVF_PYTHON:FILEPATH=//p' "$build/CMakeCache.txt")
pydir=$(sed -n 's/^KVF_PYTHON_DIR:STRING=//p' "$build/CMakeCache.txt")
if [ -n "$py" ] && [ -n "$pydir" ] && [ -z "$san" ] &&
   "$py" -c 'import numpy' 2>/dev/null; then
	say "Python: import kvflash from $prefix/$pydir"
	got=$(cd "$tmp" && env PYTHONPATH="$prefix/$pydir" "$py" -c \
		'import kvflash, kvflash._lib as l; print(l.lib._name)') ||
		die "import kvflash from $prefix/$pydir failed"
	case $got in
	"$prefix"/*) ;;
	*) die "the installed kvflash package loaded $got, not the library in $prefix" ;;
	esac
fi

say "all builds against the installed kvflash passed"
