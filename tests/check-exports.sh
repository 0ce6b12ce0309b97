#!/bin/bash
# check-exports.sh - the shared library exports the public API and nothing
# else (STYLE.md rule 19; WiredTiger's s_export).
#
# Usage: tests/check-exports.sh PATH/TO/libkvflash.so
#
# Fails (exit 1, naming each offender) when `nm -D --defined-only` lists:
#  - a symbol not starting with kvf_ (the linker's own _init/_fini are
#    allowed, though current toolchains do not export them);
#  - a kvf_ function that api/kvflash.h does not declare with KVF_API (an
#    internal helper such as kvf_malloc or kvf_fail leaking out);
# or when a KVF_API function of the header, or one of the calls every
# build must have, is missing, or when nothing is exported at all.
# The header is found next to this script, at ../api/kvflash.h.
set -u

if [ $# -ne 1 ] || [ ! -f "$1" ]; then
	echo "usage: $0 PATH/TO/libkvflash.so" >&2
	exit 2
fi
lib=$1
header=$(dirname "$0")/../api/kvflash.h
required="kvf_strerror kvf_last_error kvf_version_number kvf_version_string
kvf_options_init_sized"
failed=0

problem() {
	echo "$lib: $1"
	failed=$((failed + 1))
}

if ! syms=$(nm -D --defined-only "$lib" | awk 'NF >= 3 { print $3 }'); then
	echo "$lib: nm -D failed" >&2
	exit 1
fi
syms=$(printf '%s\n' "$syms" | sed 's/@.*//' | LC_ALL=C sort -u)

if [ ! -f "$header" ]; then
	echo "$header: not found" >&2
	exit 1
fi
# every function declared KVF_API, joined across lines: KVF_API ... name(
declared=$(tr '\n' ' ' <"$header" | grep -oE 'KVF_API[^;(]*\(' |
	grep -oE 'kvf_[A-Za-z0-9_]+[[:space:]]*\($' | tr -d ' (' | LC_ALL=C sort -u)

n=0
for s in $syms; do
	n=$((n + 1))
	case $s in
	_init | _fini) ;;
	kvf_*)
		if ! printf '%s\n' "$declared" | grep -qx -- "$s"; then
			problem "exports $s, which kvflash.h does not declare KVF_API"
		fi ;;
	*) problem "exports $s, which lacks the kvf_ prefix" ;;
	esac
done
[ "$n" -gt 0 ] || problem "exports no symbols at all"

for s in $(printf '%s\n' "$required" "$declared" | LC_ALL=C sort -u); do
	if ! printf '%s\n' "$syms" | grep -qx -- "$s"; then
		problem "does not export $s"
	fi
done

if [ "$failed" -eq 0 ]; then
	echo "check-exports: OK, $n symbols exported, all kvf_ and declared in kvflash.h"
else
	echo "check-exports: $n symbols exported, $failed problems"
fi
[ "$failed" -eq 0 ]
