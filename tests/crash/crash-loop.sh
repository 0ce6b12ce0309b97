#!/usr/bin/env bash
# crash-loop.sh - the SIGKILL and power-cut trials of
# tests/unit/engine/test_store_crash.c and test_store_power.c, as many as
# a long run wants.
#
#   tests/crash/crash-loop.sh BUILD_DIR [KILL_TRIALS] [POWER_TRIALS]
#
# Runs BUILD_DIR/tests/unit_engine --filter 'store_crash/killed_writer'
# for KILL_TRIALS trials (default 1000; KVF_CRASH_TRIALS) and --filter
# 'store_power/cuts_a' for POWER_TRIALS power cuts (default 1000;
# KVF_POWER_TRIALS); 0 skips one.  A trial forks a writer, kills it (and
# cuts the power under the store), reopens the store and checks every
# synced token against a model.  The trials run in batches of at most
# CRASH_LOOP_BATCH (default 250, what the tests' Criterion timeouts allow
# under ASan), each with a seed of its own (printed; KVF_SEED=S makes
# batch i use S + i).  Prints each batch's summary as the test prints it
# (trials, those with a sync in flight; unsynced pages kept, reverted and
# torn, catalog logs cut), then the totals and wall times.  Exit 0 when
# every batch passed, 1 when one failed (its output is shown), 2 on bad
# usage.
set -u

usage() {
	echo "usage: $0 BUILD_DIR [KILL_TRIALS] [POWER_TRIALS]" >&2
	exit 2
}
[ $# -ge 1 ] && [ $# -le 3 ] || usage
bin=$1/tests/unit_engine
kills=${2:-${KVF_CRASH_TRIALS:-1000}}
power=${3:-${KVF_POWER_TRIALS:-1000}}
batch=${CRASH_LOOP_BATCH:-250}
for n in "$kills" "$power" "$batch"; do
	case $n in '' | *[!0-9]*) usage ;; esac
done
[ "$batch" -gt 0 ] || usage
if [ ! -x "$bin" ]; then
	echo "crash-loop: no $bin (build the tests first)" >&2
	exit 2
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/crash-loop.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
status=0
n_batch=0

# now - wall clock in ms
now() {
	local t=${EPOCHREALTIME/./}
	echo $((t / 1000))
}

# sum FIELD... - add the numbers of the summary lines in $tmp/all into
# the named variables, in the order they appear on the line
sum() {
	local re=$1
	shift
	local line nums i
	while IFS= read -r line; do
		nums=($(echo "$line" | grep -o '[0-9][0-9]*'))
		i=0
		for v in "$@"; do
			eval "$v=\$(( $v + ${nums[$i]:-0} ))"
			i=$((i + 1))
		done
	done < <(grep -E "$re" "$tmp/all" | sed 's/^[^:]*: //')
}

# phase NAME FILTER ENV TOTAL - run TOTAL trials of FILTER in batches
phase() {
	local name=$1 filter=$2 var=$3 total=$4 done=0 n log rc t0
	: >"$tmp/all"
	t0=$(now)
	while [ "$done" -lt "$total" ]; do
		n=$((total - done < batch ? total - done : batch))
		log=$tmp/batch.log
		if [ -n "${KVF_SEED:-}" ]; then
			env "$var=$n" KVF_SEED=$((KVF_SEED + n_batch)) \
				"$bin" --jobs 1 --filter "$filter" >"$log" 2>&1
		else
			env "$var=$n" "$bin" --jobs 1 --filter "$filter" \
				>"$log" 2>&1
		fi
		rc=$?
		n_batch=$((n_batch + 1))
		grep -E ': seed |: [0-9]+ trials |: power cuts: ' "$log" |
			sed 's/^/  /'
		if [ $rc -ne 0 ] ||
			! grep -qE ": $n trials .*every synced token back" "$log"; then
			echo "crash-loop: $name: a batch of $n FAILED (exit $rc):" >&2
			grep -vE '^\[(----|====|RUN |PASS)\]' "$log" | tail -40 >&2
			status=1
			return
		fi
		grep -E ': [0-9]+ trials |: power cuts: ' "$log" >>"$tmp/all"
		done=$((done + n))
	done
	elapsed=$(($(now) - t0))
}

secs() {
	printf '%d.%01d s' $(($1 / 1000)) $(($1 % 1000 / 100))
}

if [ "$kills" -gt 0 ]; then
	echo "crash-loop: $kills SIGKILL trials (store_crash/killed_writer)"
	phase kills 'store_crash/killed_writer' KVF_CRASH_TRIALS "$kills"
	if [ $status -eq 0 ]; then
		t=0 f=0
		sum ': [0-9]+ trials ' t f
		echo "crash-loop: kills: $t trials ($f with a sync in flight)," \
			"every synced token back, in $(secs "$elapsed")"
	fi
fi
if [ $status -eq 0 ] && [ "$power" -gt 0 ]; then
	echo "crash-loop: $power power cuts (store_power/cuts_a)"
	phase power 'store_power/cuts_a' KVF_POWER_TRIALS "$power"
	if [ $status -eq 0 ]; then
		t=0 f=0 p=0 k=0 r=0 x=0 l=0 b=0
		sum ': [0-9]+ trials ' t f
		sum ': power cuts: ' p k r x l b
		echo "crash-loop: power cuts: $t trials ($f with a sync in" \
			"flight), every synced token back; $p unsynced pages" \
			"($k kept, $r reverted, $x torn), $l catalog logs cut by" \
			"$b bytes, in $(secs "$elapsed")"
	fi
fi
exit $status
