#!/bin/sh
# attend_model_codec.sh KVBENCH MODEL_DIR DIR CODEC MAX_PCT MIN_AGREE MAX_KL
#                       [WINDOWS]
# The tinypy model with its KV in a store of CODEC against the uncompressed
# store, over WINDOWS windows (default 8) of 128 tokens of val.bin, held to
# the bounds docs/compression.md ("Measured in the store") gives: its
# perplexity may exceed the uncompressed store's by at most MAX_PCT
# percent, over all tokens and over those whose context holds a sealed
# (encoded) group; over the latter, the next token's argmax must agree in
# at least MIN_AGREE percent of them and the mean KL(p_none || p_codec)
# stay at most MAX_KL nats.  The codec's
# token group must be shorter than the window, or no attended token would
# lie in an encoded group and the check would hold whatever the codec
# did.  Exit 77 (skip) when MODEL_DIR has no model.
set -eu
kvbench=$1 model=$2 dir=$3 codec=$4 max_pct=$5 min_agree=$6 max_kl=$7
windows=${8:-8}
if [ ! -f "$model/tinypy.bin" ] || [ ! -f "$model/val.bin" ]; then
	echo "no model in $model"
	exit 77
fi
out=$dir.json
"$kvbench" attend --model "$model" --codec "$codec" --windows "$windows" \
	--window 128 --dir "$dir" --json > "$out"
# bench_json writes one key a line; blocks open with "name": {
awk -v codec="$codec" -v max_pct="$max_pct" -v min_agree="$min_agree" \
	-v max_kl="$max_kl" '
function num(s) { sub(/,$/, "", s); return s + 0 }
/^ *"[^"]*": \{/ { split($0, f, "\""); blk = f[2]; next }
/^ *\}/ { blk = ""; next }
blk == "" && $1 == "\"window_tokens\":" { window = num($2) }
blk == "dense" && $1 == "\"perplexity\":" { ppl = num($2) }
blk == "dense_codec" && $1 == "\"codec\":" { got = $2 }
blk == "dense_codec" && $1 == "\"group_tokens\":" { g = num($2) }
blk == "dense_codec" && $1 == "\"perplexity\":" { ppl_codec = num($2) }
blk == "dense_codec" && $1 == "\"vs_dense\":" { vs = num($2); have_vs = 1 }
blk == "dense_codec" && $1 == "\"vs_dense_after_a_group\":" {
	vs_coded = num($2); have_coded = 1
}
blk == "dense_codec" && $1 == "\"agreement_after_a_group\":" {
	agree = num($2); have_agree = 1
}
blk == "dense_codec" && $1 == "\"kl_mean_after_a_group\":" {
	kl = num($2); have_kl = 1
}
END {
	if (got != "\"" codec "\",") {
		printf "the JSON names codec %s, not %s\n", got, codec
		exit 1
	}
	if (!have_vs || !have_coded || !have_agree || !have_kl || ppl <= 0 ||
	    ppl_codec <= 0) {
		print "the JSON lacks the figures"
		exit 1
	}
	if (g == 0 || g >= window) {
		printf "%s groups of %d tokens: a window of %d encodes none\n",
		       codec, g, window
		exit 1
	}
	printf "%s (G %d): perplexity %.4f against %.4f uncompressed, %+.4f %%; after a sealed group %+.4f %% (bound %+g %%)\n",
	       codec, g, ppl_codec, ppl, 100 * vs, 100 * vs_coded, max_pct
	printf "after a sealed group: argmax agreement %.2f %% (bound %g %%), mean KL %.3g nats (bound %g)\n",
	       100 * agree, min_agree, kl, max_kl
	if (100 * vs > max_pct || 100 * vs_coded > max_pct ||
	    100 * agree < min_agree || kl > max_kl) {
		print "worse than the documented bounds"
		exit 1
	}
	print "ppl-ok"
}' "$out"
