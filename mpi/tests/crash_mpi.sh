#!/bin/bash
# crash_mpi.sh - kill every rank of a sharded-store writer with SIGKILL at
# a random moment after its second sync, then reopen and verify
# (crash_mpi.c), for head and token sharding, TRIALS times each.
#
# Usage: crash_mpi.sh MPIEXEC CRASH_MPI DIR [TRIALS]
set -u
mpiexec=$1 bin=$2 dir=$3 trials=${4:-2}
seed=${KVF_SEED:-$RANDOM}
RANDOM=$seed
echo "crash_mpi.sh: seed $seed (KVF_SEED=$seed to repeat)"
run() { "$mpiexec" -np 4 --oversubscribe "$@"; }
fail=0
for shard in head token; do
	for trial in $(seq 1 "$trials"); do
		d=$dir/$shard-$trial
		rm -rf "$d" && mkdir -p "$d"
		run "$bin" write "$d" "$shard" > "$d/write.log" 2>&1 &
		job=$!
		# wait for the second sync (steps 6 and 13), at most 60 s
		for _ in $(seq 600); do
			if [ -f "$d/synced" ] && [ "$(cut -d' ' -f1 "$d/synced")" -ge 13 ] &&
			   [ "$(ls "$d"/pid-* 2>/dev/null | wc -l)" -eq 4 ]; then
				break
			fi
			kill -0 $job 2>/dev/null || break
			sleep 0.1
		done
		sleep "0.$((RANDOM % 9 + 1))"
		pids=$(cat "$d"/pid-* 2>/dev/null)
		if [ -z "$pids" ] || ! kill -0 $job 2>/dev/null; then
			echo "crash_mpi.sh: the writer stopped by itself:"
			cat "$d/write.log"
			kill -9 $job 2>/dev/null
			wait $job
			fail=1
			continue
		fi
		kill -9 $pids
		wait $job
		echo "$shard trial $trial: killed ranks $(echo $pids) at step $(cut -d' ' -f1 "$d/synced") or later"
		if ! run "$bin" verify "$d" "$shard"; then
			fail=1
		fi
	done
done
exit $fail
