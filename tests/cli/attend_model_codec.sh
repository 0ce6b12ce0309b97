#!/bin/sh
# attend_model_codec.sh KVBENCH MODEL_DIR DIR CODEC MAX_PCT [WINDOWS] - the
# tinypy model's perplexity with its KV in a store of CODEC may exceed the
# uncompressed store's by at most MAX_PCT percent (docs/compression.md,
# "Accuracy", holds the bounds), over WINDOWS windows (default 8) of 128
# tokens of val.bin.  The codec's token group must be shorter than the
# window, or no attended token would lie in an encoded group and the check
# would hold whatever the codec did.  Exit 77 (skip) when MODEL_DIR has no
# model.
set -eu
kvbench=$1 model=$2 dir=$3 codec=$4 max_pct=$5 windows=${6:-8}
if [ ! -f "$model/tinypy.bin" ] || [ ! -f "$model/val.bin" ]; then
	echo "no model in $model"
	exit 77
fi
out=$dir.json
"$kvbench" attend --model "$model" --codec "$codec" --windows "$windows" \
	--window 128 --dir "$dir" --json > "$out"
# bench_json writes one key a line; blocks open with "name": {
awk -v codec="$codec" -v max_pct="$max_pct" '
function num(s) { sub(/,$/, "", s); return s + 0 }
/^ *"[^"]*": \{/ { split($0, f, "\""); blk = f[2]; next }
/^ *\}/ { blk = ""; next }
blk == "" && $1 == "\"window_tokens\":" { window = num($2) }
blk == "dense" && $1 == "\"perplexity\":" { ppl = num($2) }
blk == "dense_codec" && $1 == "\"codec\":" { got = $2 }
blk == "dense_codec" && $1 == "\"group_tokens\":" { g = num($2) }
blk == "dense_codec" && $1 == "\"perplexity\":" { ppl_codec = num($2) }
blk == "dense_codec" && $1 == "\"vs_dense\":" { vs = num($2); have_vs = 1 }
END {
	if (got != "\"" codec "\",") {
		printf "the JSON names codec %s, not %s\n", got, codec
		exit 1
	}
	if (!have_vs || ppl <= 0 || ppl_codec <= 0) {
		print "the JSON lacks the perplexities"
		exit 1
	}
	if (g == 0 || g >= window) {
		printf "%s groups of %d tokens: a window of %d encodes none\n",
		       codec, g, window
		exit 1
	}
	printf "%s (G %d): perplexity %.4f against %.4f uncompressed, %+.4f %% (bound %+g %%)\n",
	       codec, g, ppl_codec, ppl, 100 * vs, max_pct
	if (100 * vs > max_pct) {
		print "worse than the documented bound"
		exit 1
	}
	print "ppl-ok"
}' "$out"
