#!/bin/bash
# check-layers.sh - the layer rules of DESIGN.md and STYLE.md rule 2, as a
# test: includes point down only, file names are unique, and the two
# heavyweight dependencies stay behind one file each.
#
# Usage: tests/check-layers.sh SOURCE_ROOT
#
# Checked in every .c and .h file under api/ engine/ ftl/ compute/ tools/
# bench/ (what each may include, by the layer of the header):
#   compute/  compute/ and api/ only: pure kernels, no engine, no media
#   ftl/      ftl/ and the api base headers (kvflash.h status.h alloc.h
#             options.h) only: it knows nothing of KV caches
#   engine/   anything below it; never tools/ or bench/
#   tools/    the public kvflash.h (and tools/'s own headers) only
#   bench/    anything but tools/
#   api/      kvflash.h includes no project header; the base files (status,
#             alloc, options, version) include only api/; the api glue
#             never includes tools/ or bench/
#   any       never tests/
# and: <rocksdb/...> only in engine/base/catalog.c (and in
# bench/bench_endurance_rocks.c, RocksDB as a baseline), <liburing.h> only in
# ftl/uring.c; no two source files in those folders share a file name;
# inside engine/, calls go one way: down the order listed at the top of
# docs/store.md, which names each level's folder (engine/LEVEL/) and its
# files lowest first; every engine file sits in the folder of its level.
#
# A quoted include is looked up next to the including file, then from the
# root, then in api/ (the public include path); it must exist.  An angle
# include that names a project header counts as one.  Every problem is
# printed as FILE:LINE: MESSAGE; the exit status is 1 if there is any.
set -u

if [ $# -ne 1 ] || [ ! -d "$1" ]; then
	echo "usage: $0 SOURCE_ROOT" >&2
	exit 2
fi
root=$(cd "$1" && pwd -P) || exit 2
layers="api engine ftl compute tools bench"
api_base="api/kvflash.h api/status.h api/alloc.h api/options.h"
api_base_files="$api_base api/status.c api/alloc.c api/options.c api/version.c"
passed=0
failed=0

problem() {
	echo "$1"
	failed=$((failed + 1))
}

# resolve FILE INC QUOTED - set $target to the project path (relative to
# the root) that an include names, or to "" when it names no project file
# (no subshells here: this runs once per include line)
resolve() {
	local file=$1 inc=$2 quoted=$3 cand
	target=""
	if [ "$quoted" = 1 ] && [ -f "$root/${file%/*}/$inc" ]; then
		cand=${file%/*}/$inc
	elif [ -f "$root/$inc" ]; then
		cand=$inc
	elif [ -f "$root/api/$inc" ]; then
		cand=api/$inc
	else
		return
	fi
	case $cand in
	*./*) cand=$(realpath -m "$root/$cand") && cand=${cand#"$root"/} ;;
	esac
	target=$cand
}

in_list() {
	local w
	for w in $2; do
		[ "$w" = "$1" ] && return 0
	done
	return 1
}

# why_not FILE TARGET - set $why to the rule FILE breaks by including
# TARGET, or to ""
why_not() {
	local file=$1 target=$2 from=${1%%/*} to=${2%%/*}
	why=""
	case $to in
	tests) why="includes the tests/ header $target" ; return ;;
	esac
	case $from in
	compute)
		case $to in
		compute | api) ;;
		*) why="compute/ may include only compute/ and api/ headers, not $target" ;;
		esac ;;
	ftl)
		if [ "$to" != ftl ] && ! in_list "$target" "$api_base"; then
			why="ftl/ may include only ftl/ and the api base headers ($api_base), not $target"
		fi ;;
	engine)
		case $to in
		tools | bench) why="engine/ must not include $to/ ($target)" ;;
		esac ;;
	tools)
		if [ "$to" != tools ] && [ "$target" != api/kvflash.h ]; then
			why="tools/ may include only the public kvflash.h, not $target"
		fi ;;
	bench)
		case $to in
		tools) why="bench/ must not include tools/ ($target)" ;;
		esac ;;
	api)
		if [ "$file" = api/kvflash.h ]; then
			why="the public kvflash.h must include no project header ($target)"
		elif in_list "$file" "$api_base_files" && [ "$to" != api ]; then
			why="the api base may include only api/ headers, not $target"
		else
			case $to in
			tools | bench) why="api/ must not include $to/ ($target)" ;;
			esac
		fi ;;
	esac
}

# system_rule FILE INC - set $why if INC is a system header reserved to
# another file, else to ""
system_rule() {
	why=""
	case $2 in
	rocksdb/*)
		[ "$1" = engine/base/catalog.c ] ||
			[ "$1" = bench/bench_endurance_rocks.c ] ||
			why="only engine/base/catalog.c (and the RocksDB baseline, bench/bench_endurance_rocks.c) may include <$2>" ;;
	liburing.h | liburing/*)
		[ "$1" = ftl/uring.c ] ||
			why="only ftl/uring.c may include <$2>" ;;
	esac
}

files=$(cd "$root" && for l in $layers; do
	[ -d "$l" ] && find "$l" -type f \( -name '*.c' -o -name '*.h' \)
done | LC_ALL=C sort)
n_files=0
n_includes=0
inc_re='^[[:space:]]*#[[:space:]]*include[[:space:]]*(.*)$'

for f in $files; do
	n_files=$((n_files + 1))
	while IFS= read -r hit; do
		[ -n "$hit" ] || continue
		line=${hit%%:*}
		text=${hit#*:}
		[[ $text =~ $inc_re ]] || continue
		arg=${BASH_REMATCH[1]}
		n_includes=$((n_includes + 1))
		if [[ $arg =~ ^\"([^\"]+)\" ]]; then
			inc=${BASH_REMATCH[1]}
			resolve "$f" "$inc" 1
			if [ -z "$target" ]; then
				problem "$f:$line: \"$inc\" is not a file of the tree (include project headers with their layer prefix)"
				continue
			fi
		elif [[ $arg =~ ^\<([^\>]+)\> ]]; then
			inc=${BASH_REMATCH[1]}
			resolve "$f" "$inc" 0
			if [ -z "$target" ]; then
				system_rule "$f" "$inc"
				if [ -n "$why" ]; then
					problem "$f:$line: $why"
				else
					passed=$((passed + 1))
				fi
				continue
			fi
		else
			problem "$f:$line: cannot check the include '$arg'"
			continue
		fi
		why_not "$f" "$target"
		if [ -n "$why" ]; then
			problem "$f:$line: $why"
		else
			passed=$((passed + 1))
		fi
	done < <(grep -nE '^[[:space:]]*#[[:space:]]*include' "$root/$f")
done

# unique file names: object and header names never collide
dups=$(for f in $files; do echo "${f##*/}"; done | LC_ALL=C sort | uniq -d)
for f in $files; do
	b=${f##*/}
	if in_list "$b" "$dups"; then
		others=$(for g in $files; do
			[ "$g" != "$f" ] && [ "${g##*/}" = "$b" ] && printf ' %s' "$g"
		done)
		problem "$f:1: file name $b is also used by$others"
	else
		passed=$((passed + 1))
	fi
done

# ---- the engine's call order ---------------------------------------------
# docs/store.md lists the engine's .c files lowest first, between the
# engine-order markers; a file may call a function of another engine file
# only if that file comes earlier in the list, and every engine .c file is
# in it.  Definitions are the non-static functions whose name starts a
# line's declarator at column 0 (the house style); calls are names followed
# by "(" outside comments and strings.
order_doc=$root/docs/store.md
order=$(sed -n '/<!-- engine-order: begin -->/,/<!-- engine-order: end -->/p' "$order_doc" 2>/dev/null |
	awk '/^[[:space:]]*[a-z][a-z_]*:/ {
		sub(/^[[:space:]]+/, ""); folder = $1; sub(/:$/, "", folder)
		for (i = 2; i <= NF; i++) print folder "/" $i
	}')
if [ -z "$order" ]; then
	problem "docs/store.md:1: no engine order between <!-- engine-order: begin --> and <!-- engine-order: end -->"
else
	for f in $(cd "$root" && ls engine/*.[ch] 2>/dev/null); do
		problem "$f:1: engine/ holds only level folders; move $f into the folder of its level"
	done
	for f in $(cd "$root" && ls engine/*/*.c); do
		b=${f#engine/}
		b=${b%.c}
		if in_list "$b" "$order"; then
			passed=$((passed + 1))
		else
			problem "$f:1: $f is not in the engine order of docs/store.md (a file sits in the folder of its level)"
		fi
	done
	for b in $order; do
		[ -f "$root/engine/$b.c" ] ||
			problem "docs/store.md:1: the engine order names engine/$b.c, which does not exist"
	done
	while IFS= read -r line; do
		[ -n "$line" ] || continue
		problem "$line"
	done < <(cd "$root" && awk -v order="$order" '
		BEGIN {
			n = split(order, o, "\n")
			for (i = 1; i <= n; i++) rank[o[i]] = i
		}
		FNR == 1 {
			f = FILENAME; sub(/^engine\//, "", f); sub(/\.c$/, "", f)
			files[++nf] = FILENAME; base[FILENAME] = f
			in_comment = 0
		}
		{
			s = $0
			# strip comments (across lines) and string and char literals
			out = ""
			while (s != "") {
				if (in_comment) {
					p = index(s, "*/")
					if (p == 0) { s = ""; break }
					s = substr(s, p + 2); in_comment = 0; continue
				}
				p = index(s, "/*")
				if (p == 0) { out = out s; break }
				out = out substr(s, 1, p - 1); s = substr(s, p + 2); in_comment = 1
			}
			sub(/\/\/.*/, "", out)
			gsub(/"([^"\\]|\\.)*"/, "\"\"", out)
			gsub(/'"'"'([^'"'"'\\]|\\.)*'"'"'/, "0", out)
			code[FILENAME, FNR] = out; lines[FILENAME] = FNR
			if (out ~ /^[A-Za-z_]/ && out !~ /^(static|typedef|struct|enum|union|extern|_|#)/ &&
			    out !~ /;[[:space:]]*$/ && match(out, /[A-Za-z_][A-Za-z0-9_]*\(/)) {
				name = substr(out, RSTART, RLENGTH - 1)
				if (!(name in def)) def[name] = f
			}
		}
		END {
			for (k = 1; k <= nf; k++) {
				F = files[k]; me = base[F]
				for (ln = 1; ln <= lines[F]; ln++) {
					s = code[F, ln]
					while (match(s, /[A-Za-z_][A-Za-z0-9_]*[[:space:]]*\(/)) {
						name = substr(s, RSTART, RLENGTH)
						sub(/[[:space:]]*\($/, "", name)
						s = substr(s, RSTART + RLENGTH)
						if (!(name in def)) continue
						to = def[name]
						if (to == me || !(to in rank) || !(me in rank)) continue
						if (rank[to] > rank[me] && !((F, to) in told)) {
							told[F, to] = 1
							printf "%s:%d: calls %s() of engine/%s.c, which comes after it in the engine order (docs/store.md)\n", F, ln, name, to
						}
					}
				}
			}
		}' engine/*/*.c)
	passed=$((passed + 1))
fi

echo "check-layers: $n_files files, $n_includes includes: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
