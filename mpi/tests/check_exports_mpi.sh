#!/bin/bash
# check_exports_mpi.sh - libkvflash_mpi.so exports the calls of
# mpi/kvflash_mpi.h and nothing else (as tests/check-exports.sh does for
# libkvflash.so).
#
# Usage: check_exports_mpi.sh PATH/TO/libkvflash_mpi.so PATH/TO/kvflash_mpi.h
set -u
lib=$1 header=$2
have=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVWi]$/ {print $3}' | sort -u)
want=$(grep -o 'KVF_MPI_API [^(]*(' "$header" | grep -v __attribute__ | sed "s/($//; s/.*[ *]//" | sort -u)
failed=0
for s in $have; do
	case " $(echo $want) " in
	*" $s "*) ;;
	*) echo "$lib: exports $s, which kvflash_mpi.h does not declare"; failed=1 ;;
	esac
done
for s in $want; do
	echo "$have" | grep -qx "$s" || { echo "$lib: $s is declared but not exported"; failed=1; }
done
[ -n "$want" ] || { echo "$header: no KVF_MPI_API declarations found"; failed=1; }
[ $failed = 0 ] && echo "check_exports_mpi: $(echo "$want" | wc -l) calls, nothing else"
exit $failed
