#!/bin/bash
# kvtool_store.sh - end-to-end checks of kvtool's store commands (info, ls,
# segments, verify, dump, export, import) on small stores built by
# make_store.
#
# Usage: tests/cli/kvtool_store.sh PATH/TO/kvtool PATH/TO/make_store
#
# Checked here (see tools/kvtool.1): each command's table and --json output
# (JSON validity with python3 when there is one), exit codes (0 success,
# 1 failed, 2 bad usage with exactly one line on stderr), a missing store
# (exit 1, nothing created), verify on a clean store (0) and after bytes of
# a data page or of a summary were flipped (1, naming the page), and that
# no command changes any file of the store.  The last line of output is
# "N passed, M failed"; the exit status is 1 if any check failed.
set -u

if [ $# -ne 2 ] || [ ! -x "$1" ] || [ ! -x "$2" ]; then
	echo "usage: $0 PATH/TO/kvtool PATH/TO/make_store" >&2
	exit 2
fi
KVTOOL=$1
MAKE_STORE=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvtool-store.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
if command -v python3 >/dev/null 2>&1; then
	have_python=1
else
	have_python=0
	echo "note: no python3; JSON checks skipped"
fi

# run, pass, fail, expect_rc, expect_no_stdout, expect_no_stderr,
# expect_stdout_has
FAIL_STDOUT_LINES=8
. "$(dirname "$0")/checks.sh"

expect_stdout_lacks() {
	if grep -Eq -- "$1" "$tmp/out"; then
		fail "a stdout line matches /$1/"
	else
		pass
	fi
}

# expect_stdout_lines N - stdout has exactly N lines
expect_stdout_lines() {
	n=$(wc -l <"$tmp/out")
	if [ "$n" -eq "$1" ]; then pass; else fail "$n stdout lines, want $1"; fi
}

# expect_one_stderr_line TEXT - stderr is one line starting "kvtool: " and
# containing TEXT (fixed string)
expect_one_stderr_line() {
	if [ "$(wc -l <"$tmp/err")" -eq 1 ] && [ "$(tail -c 1 "$tmp/err")" = "" ] &&
	   [ "${err#kvtool: }" != "$err" ] && grep -Fq -- "$1" "$tmp/err"; then
		pass
	else
		fail "stderr is not one 'kvtool: ' line containing '$1'"
	fi
}

# expect_json PYTHON_EXPR - stdout is valid JSON and the expression, over
# the parsed object d, is true
expect_json() {
	[ "$have_python" -eq 1 ] || return 0
	if python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
sys.exit(0 if eval(sys.argv[2]) else 1)' "$tmp/out" "$1" 2>"$tmp/pyerr"; then
		pass
	else
		fail "JSON check failed: $1 $(head -c 300 "$tmp/pyerr")"
	fi
}

# usage_error TEXT ARGS... - exit 2, nothing on stdout, one stderr line
usage_error() {
	want=$1
	shift
	run "$@"
	expect_rc 2
	expect_no_stdout
	expect_one_stderr_line "$want"
}

# command_failed TEXT ARGS... - exit 1, nothing on stdout, one stderr line
command_failed() {
	want=$1
	shift
	run "$@"
	expect_rc 1
	expect_no_stdout
	expect_one_stderr_line "$want"
}

# digest DIR - every file and directory under DIR, with contents' checksums
digest() {
	(cd "$1" && find . -print | LC_ALL=C sort | while read -r f; do
		if [ -f "$f" ]; then
			printf '%s %s\n' "$f" "$(cksum <"$f")"
		else
			printf '%s dir\n' "$f"
		fi
	done)
}

# ---- the stores -------------------------------------------------------------

S=$tmp/s
for dt in f16 bf16 f32; do
	if ! "$MAKE_STORE" "$tmp/$dt" $dt >"$tmp/make.log" 2>&1; then
		echo "make_store $dt failed:"
		cat "$tmp/make.log"
		exit 1
	fi
done
mv "$tmp/f16" "$S"
digest "$S" >"$tmp/before"

# ---- info -------------------------------------------------------------------

run info "$S"
expect_rc 0
expect_no_stderr
expect_stdout_has "^store +$S\$"
expect_stdout_has '^format +version 4 \(library [0-9]+\.[0-9]+\.[0-9]+\)$'
expect_stdout_has '^model +3 layers, 4 query heads, 2 KV heads, head_dim 64, f16$'
expect_stdout_has '^pages +4096 bytes, 32 tokens of one head per K/V page$'
expect_stdout_has '^segments +64\.0 KiB each \(15 data pages and a summary\); 2 stripes x 32 = 64 segments$'
expect_stdout_has '^capacity +4\.0 MiB \(4194304 bytes\), file media, K\^T pages off, opened read-only$'
expect_stdout_has '^sequences +4$'
expect_stdout_has '^segment use +[0-9]+ sealed, 0 open, [0-9]+ dying, 0 corrupt, [0-9]+ free$'
expect_stdout_has '^WA +host '
expect_stdout_has '^disk +[0-9.]+ [KM]iB allocated for [0-9.]+ [KM]iB live: media files [0-9.]+ [KM]iB, catalog and the rest [0-9.]+ [KM]iB$'

run info --json "$S"
expect_rc 0
expect_no_stderr
expect_stdout_lines 1
expect_json 'd["model"] == {"n_layers": 3, "n_q_heads": 4, "n_kv_heads": 2, "head_dim": 64, "dtype": "f16"} and d["sequences"] == 4 and d["segments"]["total"] == 64 and d["read_only"] is True and d["page_size"] == 4096 and d["group_tokens"] == 32'
# allocated: the stripe files' blocks (sparse, far below their 4 MiB) hold
# at least the live pages, and the whole is the parts
expect_json 'd["disk"]["live_bytes"] == d["live_pages"] * 4096 and d["disk"]["media_bytes"] >= d["disk"]["live_bytes"] > 0 and d["disk"]["media_bytes"] < 4194304 and d["disk"]["allocated_bytes"] == d["disk"]["media_bytes"] + d["disk"]["other_bytes"]'

run info "$tmp/bf16" --json
expect_rc 0
expect_json 'd["model"]["dtype"] == "bf16"'

# ---- ls ----------------------------------------------------------------------

run ls "$S"
expect_rc 0
expect_no_stderr
expect_stdout_has '^SEQ +PARENT +FAMILY +PAGES +SHARED +PREFIX +K/V TOKENS +X TOKENS$'
expect_stdout_has '^1 +- +1 +48 +24 +- +100 x3 +-$'
expect_stdout_has '^2 +1 +1 +48 +24 +- +100 x3 +-$'
expect_stdout_has '^3 +- +3 +20 +0 +- +40 0 0 +40 0 20$'
expect_stdout_has '^10 +- +10 +0 +0 +- +0 x3 +-$'
expect_stdout_lacks '^4 '
expect_stdout_lines 5

run ls --json "$S"
expect_rc 0
expect_no_stderr
expect_json '[s["id"] for s in d["sequences"]] == [1, 2, 3, 10]'
expect_json 'd["sequences"][1]["parent"] == 1 and d["sequences"][0]["parent"] is None and d["sequences"][1]["family"] == 1'
expect_json 'd["sequences"][2]["len"] == [40, 0, 0] and d["sequences"][2]["x_len"] == [40, 0, 20]'
expect_json 'd["sequences"][0]["pages"] == 48 and d["sequences"][0]["shared_pages"] == 24'

# ---- segments ----------------------------------------------------------------

run segments "$S"
expect_rc 0
expect_no_stderr
expect_stdout_has '^SEG +STRIPE +INDEX +STATE +DATA +LIVE +OWNER +SEQNO +AGE +ERASES$'
expect_stdout_has '^0 +0 +0 +sealed +15 +15 +1 +[0-9]+ +[0-9]+[smhd] +0$'
expect_stdout_has '^64 segments: [0-9]+ sealed, 0 open, [0-9]+ dying, 0 corrupt, [0-9]+ free \(--all lists the free ones\)$'
expect_stdout_lacks '^[0-9]+ +[0-9]+ +[0-9]+ +free '
# one row per segment that is not free, a header and the totals
if [[ $out =~ ([0-9]+)\ sealed,\ 0\ open,\ ([0-9]+)\ dying ]]; then
	listed=$((BASH_REMATCH[1] + BASH_REMATCH[2]))
	expect_stdout_lines $((listed + 2))
else
	fail "no totals line"
fi

run segments --all "$S"
expect_rc 0
expect_stdout_lines 66
expect_stdout_has '^[0-9]+ +[01] +[0-9]+ +free +0 +0 +- +- +- +[0-9]+$'

run segments --json --all "$S"
expect_rc 0
expect_no_stderr
expect_json 'len(d["segments"]) == 64 == d["total"] and [s["segid"] for s in d["segments"]] == list(range(64))'
expect_json 'all(s["stripe"] == s["segid"] % 2 and s["seg_in_stripe"] == s["segid"] // 2 for s in d["segments"])'
expect_json 'd["sealed"] > 0 and all((s["owner"] is None) == (s["state"] == "free") for s in d["segments"])'

run segments --json "$S"
expect_rc 0
expect_json 'len(d["segments"]) == d["total"] - d["free"] and all(s["state"] != "free" for s in d["segments"])'

# ---- verify (clean) -----------------------------------------------------------

run verify "$S"
expect_rc 0
expect_no_stderr
expect_stdout_has '^checked 116 pages of 4 sequences and [0-9]+ segment summaries \(.* read\): 0 damaged pages, 0 damaged summaries$'
expect_stdout_lines 1

run verify --json "$S"
expect_rc 0
expect_no_stderr
expect_json 'd["clean"] is True and d["damage"] == [] and d["pages_checked"] == 116 and d["sequences_checked"] == 4 and d["bad_pages"] == 0'

for dt in bf16 f32; do
	run verify "$tmp/$dt"
	expect_rc 0
done

# ---- dump ----------------------------------------------------------------------

# K = token + head/4 + d/8 + layer/2, V = -K, X = token + slice/4 + d/8
run dump "$S" --seq 3 --layer 0 --head 1 --tokens 0:2
expect_rc 0
expect_no_stderr
expect_stdout_has '^# sequence 3 layer 0 KV head 1, tokens \[0, 2\), f16, head_dim 64$'
expect_stdout_has '^K 0: 0\.25 0\.375 0\.5 .* 8 8\.125$'
expect_stdout_has '^K 1: 1\.25 1\.375 '
expect_stdout_has '^V 0: -0\.25 -0\.375 '
expect_stdout_has '^V 1: -1\.25 '
expect_stdout_lines 5

for dt in bf16 f32; do
	run dump "$tmp/$dt" --seq 1 --layer 2 --head 0 --tokens 1:2 --kind v
	expect_rc 0
	expect_stdout_has "^# sequence 1 layer 2 KV head 0, tokens \\[1, 2\\), $dt, head_dim 64\$"
	expect_stdout_has '^V 1: -2 -2\.125 -2\.25 '
	expect_stdout_lines 2
done

# the fork shares its parent's first groups and has its own tail
run dump "$S" --seq=2 --layer=1 --head=1 --tokens=69:71 --kind=k
expect_rc 0
expect_stdout_has '^K 69: 69\.75 69\.875 '
expect_stdout_has '^K 70: 70\.75 70\.875 '

run dump --json "$S" --seq 3 --layer 2 --head 3 --tokens 18: --kind x
expect_rc 0
expect_no_stderr
expect_json 'd["tokens"] == [18, 20] and len(d["x"]) == 2 and d["x"][0][:2] == [18.75, 18.875] and d["x"][1][63] == 19.75 + 63 / 8 and "k" not in d'

run dump --json "$S" --seq 1 --layer 0 --head 0 --tokens :3
expect_rc 0
expect_json 'len(d["k"]) == 3 == len(d["v"]) and d["k"][2][0] == 2 and d["v"][2][0] == -2 and all(len(r) == 64 for r in d["k"])'

run dump "$S" --seq 10 --layer 0 --head 0 --tokens 0:0
expect_rc 0
expect_stdout_lines 1

# bad usage: exit 2, one line
usage_error "missing --seq" dump "$S" --layer 0 --head 0 --tokens 0:1
usage_error "missing --tokens" dump "$S" --seq 1 --layer 0 --head 0
usage_error "missing DIR" dump --seq 1 --layer 0 --head 0 --tokens 0:1
usage_error "--tokens '5' is not A:B" dump "$S" --seq 1 --layer 0 --head 0 --tokens 5
usage_error "--tokens '5:x'" dump "$S" --seq 1 --layer 0 --head 0 --tokens 5:x
usage_error "is reversed" dump "$S" --seq 1 --layer 0 --head 0 --tokens 5:2
usage_error "--kind 'q' is not k, v or x" dump "$S" --seq 1 --layer 0 --head 0 --tokens 0:1 --kind q
usage_error "--seq '-1'" dump "$S" --seq -1 --layer 0 --head 0 --tokens 0:1
usage_error "needs a value" dump "$S" --seq 1 --layer 0 --head 0 --tokens
usage_error "unexpected argument 'extra'" dump "$S" extra --seq 1 --layer 0 --head 0 --tokens 0:1

# the store says no: exit 1, one line with the library's message
command_failed "layer 7 out of range (store has 3 layers)" dump "$S" --seq 1 --layer 7 --head 0 --tokens 0:1
command_failed "sequence 99 does not exist" dump "$S" --seq 99 --layer 0 --head 0 --tokens 0:1
command_failed "past the end" dump "$S" --seq 1 --layer 0 --head 0 --tokens 0:101
command_failed "kv_head 2 out of range" dump "$S" --seq 1 --layer 0 --head 2 --tokens 0:1
command_failed "out of range for X (store has 4 query heads)" dump "$S" --seq 3 --layer 0 --head 4 --tokens 0:1 --kind x

# ---- every store command: usage errors and missing stores ---------------------

for c in info ls segments verify; do
	usage_error "kvtool: $c: missing DIR (usage: kvtool $c " $c
	usage_error "kvtool: $c: unknown option '--frob'" $c --frob "$S"
	usage_error "kvtool: $c: unexpected argument 'extra'" $c "$S" extra
	usage_error "option '--json' takes no value" $c --json=1 "$S"
	command_failed "$tmp/none holds no store" $c "$tmp/none"
	if [ ! -e "$tmp/none" ]; then pass; else fail "created $tmp/none"; fi
	mkdir "$tmp/empty"
	command_failed "kvf_open: $tmp/empty holds no store" $c "$tmp/empty"
	if [ -z "$(ls -A "$tmp/empty")" ]; then pass; else fail "wrote into an empty dir"; fi
	rmdir "$tmp/empty"
	run help $c
	expect_rc 0
	expect_stdout_has "^usage: kvtool $c "
done
command_failed "$tmp/none holds no store" dump "$tmp/none" --seq 1 --layer 0 --head 0 --tokens 0:1

# ---- nothing above changed the store -----------------------------------------

digest "$S" >"$tmp/after"
what="store files after every command"
rc=0
if cmp -s "$tmp/before" "$tmp/after"; then
	pass
else
	fail "changed: $(diff "$tmp/before" "$tmp/after" | head -5)"
fi

# ---- verify (damaged) -----------------------------------------------------------

# flip_bytes FILE OFFSET - overwrite 4 bytes at OFFSET with their complement
flip_bytes() {
	od -An -tu1 -j "$2" -N 4 "$1" | awk '{ for (i = 1; i <= NF; i++) printf "%c", 255 - $i }' |
		LC_ALL=C dd of="$1" bs=1 seek="$2" conv=notrunc 2>/dev/null
}

# the first sealed segment: its stripe, index, data pages
run segments "$S"
row=$(grep -E '^[0-9]+ +[0-9]+ +[0-9]+ +sealed ' "$tmp/out" | head -1)
read -r seg stripe idx _ ndata _ <<<"$row"
D=$tmp/damaged
cp -a "$S" "$D"
stripe_file=$D/$(printf 'stripe-%03u.kvf' "$stripe")
page=$((ndata > 1 ? 1 : 0))
flip_bytes "$stripe_file" $((idx * 65536 + page * 4096 + 100))
digest "$D" >"$tmp/before"

run verify "$D"
expect_rc 1
expect_stdout_has "^damaged: segment $seg page $page \\(stripe $stripe at byte $((idx * 65536 + page * 4096))\\), sequence [0-9]+ layer [0-9] [KVX] head [0-9]+ group [0-9]+ \\(tokens [0-9]+\\.\\.[0-9]+\\): checksum mismatch: "
expect_stdout_has ': [1-9][0-9]* damaged pages, 0 damaged summaries$'
expect_one_stderr_line "$D is damaged: "

run verify --json "$D"
expect_rc 1
expect_one_stderr_line "is damaged"
expect_json "d['clean'] is False and d['bad_pages'] >= 1 and d['damage'][0]['segid'] == $seg and d['damage'][0]['page'] == $page and d['damage'][0]['status'] == 41 and 'checksum mismatch' in d['damage'][0]['message']"

# reading the damaged page is refused too, naming it
run verify "$D"
if [[ $out =~ sequence\ ([0-9]+)\ layer\ ([0-9]+)\ ([KVX])\ head\ ([0-9]+)\ group\ ([0-9]+) ]]; then
	kind=$(printf '%s' "${BASH_REMATCH[3]}" | tr KVX kvx)
	t=$((BASH_REMATCH[5] * 32))
	command_failed "segment $seg (stripe $stripe, segment $idx of the stripe) page $page: checksum mismatch" \
		dump "$D" --seq "${BASH_REMATCH[1]}" --layer "${BASH_REMATCH[2]}" \
		--head "${BASH_REMATCH[4]}" --kind "$kind" --tokens $t:$((t + 1))
else
	fail "no damaged page named"
fi
run info "$D"
expect_rc 0

# a damaged summary: the segment is refused at open, its pages reported
flip_bytes "$stripe_file" $((idx * 65536 + ndata * 4096 + 60))
run verify "$D"
expect_rc 1
expect_stdout_has "^damaged: segment $seg \\(stripe $stripe, segment $idx of the stripe\\): summary at page $ndata: "
expect_stdout_has "^damaged: segment $seg page [0-9]+ .*failed verification at open"
expect_stdout_has ': [1-9][0-9]* damaged pages, 1 damaged summaries$'

run segments --json "$D"
expect_json "[s['state'] for s in d['segments'] if s['segid'] == $seg] == ['corrupt']"

flip_bytes "$stripe_file" $((idx * 65536 + ndata * 4096 + 60))
digest "$D" >"$tmp/after"
what="damaged store files after verify"
rc=0
if cmp -s "$tmp/before" "$tmp/after"; then pass; else fail "changed"; fi

# ---- prefixes, export and import ----------------------------------------------

P=$tmp/prefix
"$MAKE_STORE" "$P" f16 prefix >/dev/null || fail "make_store prefix"
run ls "$P"
expect_rc 0
# 1 and 2 share two whole chunks (64 of their 100 token ids); 3 shares none
expect_stdout_has '^1 +- +1 +[0-9]+ +[0-9]+ +2/3 @[0-9a-f]{8} +100 x3 +-$'
expect_stdout_has '^2 +1 +1 +[0-9]+ +[0-9]+ +2/3 @[0-9a-f]{8} +100 x3 +-$'
expect_stdout_has '^3 +- +3 +[0-9]+ +0 +1 chunks +40 x3 +-$'
# 4 was freed: its three whole chunks are a cached prefix, listed last
expect_stdout_has '^[0-9]+ +4 +4 +[0-9]+ +0 +cached 3/3 own, 0 hits +96 x3 +-$'
h1=$(awk '$1 == 1 { print $7 }' "$tmp/out")
h2=$(awk '$1 == 2 { print $7 }' "$tmp/out")
what="ls: 1 and 2 name the same shared prefix"
rc=0
if [ -n "$h1" ] && [ "$h1" = "$h2" ]; then pass; else fail "'$h1' and '$h2'"; fi
run ls --json "$P"
expect_json 'd["sequences"][1]["prefix"]["shared_chunks"] == 2 and d["sequences"][1]["prefix"]["token_ids"] == 100'
expect_json '[s["cached"] for s in d["sequences"]] == [False, False, False, True] and d["sequences"][3]["cached_own_chunks"] == 3'
run info "$P"
expect_rc 0
expect_stdout_has '^prefix +8 chunks in the index; since open 0 lookups'
expect_stdout_has '^prefix cache 1 cached prefixes, 144.0 KiB only they hold; since open 0 kept'
run info --json "$P"
expect_json 'd["prefix"]["chunks"] == 8 and d["prefix"]["cached"] == 1 and d["prefix"]["cached_bytes"] == 3 * 3 * 2 * 2 * 32 * 128'

run export "$P" 2 "$tmp/seq2.kvx"
expect_rc 0
expect_stdout_has "^exported sequence 2 \\(100 tokens a layer\\) to $tmp/seq2.kvx: [0-9]+ bytes$"
cp -a "$P" "$tmp/p2"
run import "$tmp/p2" "$tmp/seq2.kvx" 20
expect_rc 0
expect_stdout_has "^imported $tmp/seq2.kvx as sequence 20$"
run dump --json "$tmp/p2" --seq 20 --layer 2 --head 1 --tokens 0:100
sed 's/^.*"layer"//' "$tmp/out" >"$tmp/dump20"
run dump --json "$P" --seq 2 --layer 2 --head 1 --tokens 0:100
sed -i 's/^.*"layer"//' "$tmp/out"
what="import: sequence 20 holds sequence 2's values"
rc=0
if [ -s "$tmp/out" ] && cmp -s "$tmp/out" "$tmp/dump20"; then pass; else fail "differs"; fi
digest "$tmp/p2" >"$tmp/p2.before"
command_failed "sequence 20 exists already" import "$tmp/p2" "$tmp/seq2.kvx" 20
command_failed "sequence 2 exists already" import "$tmp/p2" "$tmp/seq2.kvx"
command_failed "holds f16 values; this store keeps f32" import "$tmp/f32" "$tmp/seq2.kvx" 5
head -c 1000 "$tmp/seq2.kvx" >"$tmp/short.kvx"
command_failed "inside a chunk" import "$tmp/p2" "$tmp/short.kvx" 21
command_failed "is not a kvflash sequence export" import "$tmp/p2" "$MAKE_STORE" 21
command_failed "No such file" import "$tmp/p2" "$tmp/none.kvx" 21
digest "$tmp/p2" >"$tmp/p2.after"
what="a refused import leaves every file of the store as it was"
rc=0
if cmp -s "$tmp/p2.before" "$tmp/p2.after"; then pass; else fail "$(diff "$tmp/p2.before" "$tmp/p2.after" | head -5)"; fi
command_failed "sequence 99 does not exist" export "$P" 99 "$tmp/x.kvx"
if [ ! -e "$tmp/x.kvx" ] && [ ! -e "$tmp/x.kvx.tmp" ]; then pass; else fail "a failed export left a file"; fi
usage_error "kvtool: export: missing SEQ and FILE" export "$P"
usage_error "kvtool: export: SEQ 'x' is not a number" export "$P" x "$tmp/x.kvx"
usage_error "kvtool: import: missing FILE" import "$P"
usage_error "kvtool: import: unexpected argument 'more'" import "$P" f 1 more

# ---- a store with a codec ----------------------------------------------------

# int8 at head_dim 64 on 4 KiB pages: groups of 62 tokens, so sequence 1's
# tokens 62..99 are the plain tail, the first 62 encoded
if ! "$MAKE_STORE" "$tmp/int8" f16 int8 >"$tmp/make.log" 2>&1; then
	echo "make_store int8 failed:"
	cat "$tmp/make.log"
	exit 1
fi
run info "$tmp/int8"
expect_rc 0
expect_stdout_has '^codec +int8: 62 tokens of one head per K/V group, encoded in 1 page of 4096 bytes \(4096 bytes used, layout version 1\), the part-filled last group plain$'
run info --json "$tmp/int8"
expect_rc 0
expect_json 'd["codec"] == "int8" and d["group_tokens"] == 62 and d["codec_layout"] == 1'
run info --json "$S"
expect_json 'd["codec"] == "none" and d["codec_layout"] == 0'
run verify "$tmp/int8"
expect_rc 0
expect_stdout_has ': 0 damaged pages, 0 damaged summaries$'
# the tail exact; a sealed token within INT8's step of K = 99 + 1/4 + d/8
run dump "$tmp/int8" --seq 1 --layer 0 --head 1 --tokens 99:100 --kind k
expect_rc 0
expect_stdout_has '^K 99: 99\.25 99\.375 99\.5 '
run dump --json "$tmp/int8" --seq 1 --layer 0 --head 1 --tokens 61:62 --kind k
expect_rc 0
expect_json 'all(abs(x - (61.25 + d / 8)) <= 0.5 for d, x in enumerate(d["k"][0]))'

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
