#!/bin/sh
# kvbench_args.sh KVBENCH DIR - option combinations a mode does not read
# are refused (exit 2, the option named, nothing made in DIR), not
# silently ignored.
set -u
kvbench=$1 dir=$2
rm -rf "$dir"
mkdir -p "$dir"
fails=0

# refused CMD... WORD: exit 2, WORD in the message, no store directory made
refused() {
	want=$1
	shift
	rm -rf "$dir/run"
	"$@" --dir "$dir/run" > "$dir/out" 2> "$dir/err"
	rc=$?
	if [ "$rc" != 2 ] || ! grep -q -- "$want" "$dir/err" || [ -e "$dir/run" ]; then
		echo "not refused as it should be (exit $rc): $*"
		cat "$dir/err"
		fails=$((fails + 1))
	fi
}

refused "--budget does nothing without --codec" "$kvbench" attend --budget 1G
refused "--window does nothing without --model" "$kvbench" attend --window 64
refused "--top-k does nothing with --codec" "$kvbench" attend --codec int4 --top-k 8
refused "--windows does nothing without --model" "$kvbench" attend --codec int8 --windows 2
refused "--tokens does nothing with --model" "$kvbench" attend --model "$dir/no-model" --tokens 1K
refused "--threads does nothing with --model" "$kvbench" attend --model "$dir/no-model" --threads 1
refused "is not below --budget" "$kvbench" decode --budget 64M --fit 64M
refused "is not below --budget" "$kvbench" decode --budget 64M --fit 1G
refused "unknown option" "$kvbench" attend --no-such-option
[ "$fails" = 0 ] || exit 1
echo refusals-ok
