#!/bin/sh
# endurance_smoke.sh KVBENCH DIR - kvbench endurance end to end at a small
# size, every system on every workload (train: the four that hold
# optimizer state): each of the 22 JSON objects ran
# and carries the figures' keys.  Then --plot on a subset (offline only,
# two systems): the plots of what ran, and none of the online workload's.
set -eu
kvbench=$1 dir=$2
out=$dir.json
"$kvbench" endurance --dir "$dir" --quiet --json --layers 2 --q-heads 4 \
	--kv-heads 2 --head-dim 64 --batch 2 --rounds 1 --prompt 64 --gen 24 \
	--steps 60 --rate 0.2 --on-prompt 32 --on-gen 16 --convs 3 --turns 2 \
	--chat-prompt 16 --chat-gen 16 --think 5 --sync-every 8 \
	--train-params 64K --train-steps 3 > "$out"
for k in host_wa device_wa total_wa nand_bytes_per_token requests_per_pbw \
	lifetime_years; do
	n=$(grep -c "\"$k\": " "$out" || true)
	if [ "$n" != 22 ]; then
		echo "\"$k\" in $n objects, not 22"
		exit 1
	fi
done
n=$(grep -c '"ok": 1' "$out" || true)
[ "$n" = 22 ] || { echo "$n of 22 runs succeeded"; exit 1; }
if command -v python3 >/dev/null; then
	python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert len(r)==22' "$out"
fi
echo keys-ok
if command -v gnuplot >/dev/null; then
	rm -rf "$dir.plot" "$dir.sub"
	"$kvbench" endurance --dir "$dir.sub" --quiet --layers 2 --q-heads 4 \
		--kv-heads 2 --head-dim 64 --batch 2 --rounds 1 --prompt 64 \
		--gen 24 --sync-every 8 --workloads offline \
		--systems kvflash,rocksdb --plot "$dir.plot" > "$dir.sub.out"
	[ -s "$dir.plot/bytes_per_token.png" ] || { echo "no bytes_per_token.png"; exit 1; }
	[ ! -e "$dir.plot/wa_spare.png" ] || { echo "an online plot without the online workload"; exit 1; }
	head -1 "$dir.plot/bytes_per_token.dat" | grep -qx "workload kvflash rocksdb" ||
		{ head -1 "$dir.plot/bytes_per_token.dat"; exit 1; }
	echo plot-subset-ok
fi
