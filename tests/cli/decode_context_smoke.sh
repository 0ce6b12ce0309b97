#!/bin/sh
# decode_context_smoke.sh KVBENCH DIR - `kvbench decode --context` at a
# tiny shape, in seconds: the JSON parses, every system ran, the store's
# dram_budget is below the K+V, kvflash read from media and the FlexGen
# reader read every prompt byte, and the in-memory and FlexGen outputs
# agree with kvf_attend's; --plot writes its data file and gnuplot script
# (and the PNG when gnuplot is installed; without it, no PNG and exit 0).
# Bad arguments exit 2 with a message and create nothing.
set -eu
kvbench=$1
dir=$2
command -v python3 >/dev/null 2>&1 || { echo "no python3: skipped"; exit 77; }
rm -rf "$dir"
mkdir -p "$dir/nobin"
tiny="--layers 1 --q-heads 4 --kv-heads 2 --head-dim 64 --steps 2 --warmup 1"

# bad arguments: exit 2, the reason on stderr, no store made
bad() {
	want=$1
	shift
	if "$kvbench" decode --dir "$dir/bad" "$@" >"$dir/out" 2>"$dir/err"; then
		echo "accepted: $*"; exit 1
	else
		rc=$?
	fi
	[ "$rc" -eq 2 ] || { echo "exit $rc, not 2: $*"; cat "$dir/err"; exit 1; }
	grep -q -- "$want" "$dir/err" || { echo "no '$want' for: $*"; cat "$dir/err"; exit 1; }
	[ ! -e "$dir/bad" ] || { echo "made $dir/bad for: $*"; exit 1; }
}
# shellcheck disable=SC2086
bad "must not fit" --context 4096 $tiny --budget 16M
# shellcheck disable=SC2086
bad "must not fit" --context 1024 $tiny
bad "not a number" --context 4096,x
bad "64 to 16M" --context 32
bad "expected numbers" --context 4096,,8192
bad "out of range" --context 4096 --sparse 3
bad "multiple of --kv-heads" --context 4096 --q-heads 6 --kv-heads 4
bad "is not fp8, int8 or int4" --context 4096 --codec zip
"$kvbench" decode --context 4096 --help | grep -q -- "--sparf-share" ||
	{ echo "--context --help does not show its options"; exit 1; }

# the run, without gnuplot on PATH: data file and script, no PNG
# shellcheck disable=SC2086
PATH="$dir/nobin" "$kvbench" decode --dir "$dir/run" --context 4096 \
	--context 8192 $tiny --json --plot "$dir/plot" >"$dir/json" 2>"$dir/err" ||
	{ cat "$dir/err"; exit 1; }
grep -q "gnuplot not found" "$dir/err" || { cat "$dir/err"; exit 1; }
[ -s "$dir/plot/decode_context.gp" ] || { echo "no gnuplot script"; exit 1; }
[ ! -e "$dir/plot/decode_context.png" ] || { echo "a PNG without gnuplot"; exit 1; }
[ "$(grep -c '^[0-9]' "$dir/plot/decode_context.dat")" -eq 2 ] ||
	{ echo "not one data line a context:"; cat "$dir/plot/decode_context.dat"; exit 1; }
grep -q "decode_context.dat' u 1:5" "$dir/plot/decode_context.gp" ||
	{ echo "the script does not plot every system"; exit 1; }
[ ! -e "$dir/run" ] || { echo "the stores were left in $dir/run"; exit 1; }

python3 - "$dir/json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["bench"] == "decode_context", d["bench"]
assert d["agree"] == 1, "the systems disagree"
ctx = d["contexts"]
assert sorted(ctx, key=int) == ["4096", "8192"], list(ctx)
m = d["model"]
regions = m["n_layers"] * 2 * m["n_kv_heads"]  # (layer, K or V, KV head)
row = m["head_dim"] * 2                         # f16 bytes of a head's token
for n, p in ctx.items():
    s = p["systems"]
    assert sorted(s) == ["flexgen", "in_memory", "kvflash_dense",
                         "kvflash_sparf"], list(s)
    assert p["agree"] == 1
    assert p["dram_budget"] < p["kv_bytes"], (p["dram_budget"], p["kv_bytes"])
    for name, f in s.items():
        assert f["tokens_per_s"] > 0, (n, name)
    for name in ("in_memory", "flexgen"):
        assert s[name]["max_err_vs_dense"] <= d["max_err_allowed"], (n, name)
        assert s[name]["min_cos_vs_dense"] >= d["min_cos_allowed"], (n, name)
    assert s["in_memory"]["bytes_read_per_step"] == 0
    # FlexGen reads the whole pages of every token before the step's
    # (the JSON keeps 6 digits)
    assert s["flexgen"]["bytes_read_per_step"] >= \
        0.9999 * regions * (int(n) * row // 4096 * 4096)
    assert s["kvflash_dense"]["bytes_read_per_step"] > 0
    assert 0 < s["kvflash_sparf"]["bytes_read_per_step"] < \
        s["kvflash_dense"]["bytes_read_per_step"]
    assert s["kvflash_dense"]["codec"] == "none"
PY

# rows that cross pages (head_dim 72: 144 bytes) and enough steps to
# fill FlexGen's tail pages and write them: still the same attention;
# SparF by tokens, one thread
"$kvbench" decode --dir "$dir/run" --context 8000 --layers 1 --q-heads 4 \
	--kv-heads 2 --head-dim 72 --steps 40 --warmup 2 --sparse 1 --threads 1 \
	--json >"$dir/json" 2>"$dir/err" || { cat "$dir/err"; exit 1; }
python3 - "$dir/json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["agree"] == 1 and d["sparse"] == 1 and d["threads"] == 1
s = d["contexts"]["8000"]["systems"]
# 42 tokens of 144 bytes fill at least one page of each of the 4 tails
assert s["flexgen"]["bytes_written_per_step"] * 40 >= 4 * 4096, s["flexgen"]
PY

# compressed KV: one more kvflash row, dense over an INT4 store, reading
# fewer bytes than dense and close to it (checked loosely: its cosine is
# reported, not held to the baselines' bound)
# shellcheck disable=SC2086
"$kvbench" decode --dir "$dir/run" --context 8192 $tiny --codec int4 \
	--json >"$dir/json" 2>"$dir/err" || { cat "$dir/err"; exit 1; }
python3 - "$dir/json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["agree"] == 1
s = d["contexts"]["8192"]["systems"]
assert sorted(s) == ["flexgen", "in_memory", "kvflash_dense", "kvflash_int4",
                     "kvflash_sparf"], list(s)
c = s["kvflash_int4"]
assert c["codec"] == "int4", c
assert 0 < c["bytes_read_per_step"] < 0.5 * s["kvflash_dense"]["bytes_read_per_step"], \
    (c["bytes_read_per_step"], s["kvflash_dense"]["bytes_read_per_step"])
assert c["min_cos_vs_dense"] > 0.9, c
PY
[ ! -e "$dir/run" ] || { echo "the stores were left in $dir/run"; exit 1; }

# with gnuplot, the PNG too
if command -v gnuplot >/dev/null 2>&1; then
	# shellcheck disable=SC2086
	"$kvbench" decode --dir "$dir/run" --context 4096 $tiny \
		--plot "$dir/plot" >"$dir/table" 2>"$dir/err" || { cat "$dir/err"; exit 1; }
	[ -s "$dir/plot/decode_context.png" ] || { echo "no PNG"; exit 1; }
	grep -q "against dense kvf_attend (every step and layer): agree" "$dir/table" ||
		{ cat "$dir/table"; exit 1; }
fi
rm -rf "$dir"
echo "decode-context-ok"
