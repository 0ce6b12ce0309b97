#!/bin/bash
# check-layers.sh - the layer rules of DESIGN.md and STYLE.md rule 2, and
# the order inside each folder (docs/architecture.md), as a test: includes,
# calls and imports point down only, nothing goes in a circle, file names
# are unique, and the two heavyweight dependencies stay behind one file
# each.
#
# Usage: tests/check-layers.sh SOURCE_ROOT
#
# Checked in every .c and .h file under api/ engine/ ftl/ compute/ mpi/
# (but mpi/tests/) tools/ bench/, and every .py file of python/kvflash/.
# 1. What each folder may include, by the folder of the header:
#   compute/  compute/ and api/ only: pure kernels, no engine, no media
#   ftl/      ftl/ and the api base headers (kvflash.h status.h alloc.h
#             options.h) only: it knows nothing of KV caches
#   engine/   anything below it; never mpi/, tools/ or bench/
#   mpi/      the public kvflash.h and mpi/'s own headers only
#   tools/    the public kvflash.h (and tools/'s own headers) only
#   bench/    anything but tools/ and mpi/
#   api/      kvflash.h includes no project header; the base files (status,
#             alloc, options, version) include only api/; the api glue
#             never includes mpi/, tools/ or bench/
#   any       never tests/
# and: <rocksdb/...> only in engine/base/catalog.c (and in
# bench/bench_endurance_rocks.c, RocksDB as a baseline), <liburing.h> only in
# ftl/uring.c; only python/kvflash/_lib.py loads the C library (and _lib_mpi.py the optional kvflash_mpi; ctypes
# CDLL, cdll, LoadLibrary, find_library); no two source files share a
# file name.
# 2. The order inside a folder: engine/ is listed at the top of
# docs/store.md (LEVEL: files, one folder engine/LEVEL/ per level), ftl/,
# compute/, mpi/ and python/kvflash/ in docs/architecture.md, each lowest
# first.  A module is a .c file and the header of the same name beside it
# (or a .py file); every .c and .py file of an ordered folder is listed,
# and every engine file sits in the folder of its level.  A module may
# include, call and import only modules listed before it (or itself).  A
# header with no .c of its own (types and inline helpers: *_state.h,
# *_int.h, kernels.h) is as high as the highest module it includes, so a
# file may include it only if it may include all of that.
# 3. No circle: the modules of all the checked folders, with an arrow for
# every include, call and import between two of them, form no circle; a
# header with no .c is a node of its own, but for a module's private
# header (MODULE_int.h or MODULE_impl.h beside MODULE.h, which it
# includes), which is part of MODULE.  This covers the folders without a
# stated order too (tools/, bench/, api/).
#
# Calls: a call is a name followed by "(" outside comments and strings, in
# a .c file, that names a non-static function defined at column 0 (the
# house style) in exactly one .c file, not the calling file itself; a use
# of a function's or a table's address is not a call, so a backend that
# fills an ops table sits below whoever opens it.  A quoted include is
# looked up next to the including file, then from the root, then in api/
# (the public include path); it must exist.  An angle include that names a
# project header counts as one.  Every problem is printed as FILE:LINE:
# MESSAGE; the exit status is 1 if there is any.
set -u

if [ $# -ne 1 ] || [ ! -d "$1" ]; then
	echo "usage: $0 SOURCE_ROOT" >&2
	exit 2
fi
root=$(cd "$1" && pwd -P) || exit 2
layers="api engine ftl compute mpi tools bench"
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
		mpi | tools | bench) why="engine/ must not include $to/ ($target)" ;;
		esac ;;
	mpi)
		if [ "$to" != mpi ] && [ "$target" != api/kvflash.h ]; then
			why="mpi/ may include only the public kvflash.h and mpi/ headers, not $target"
		fi ;;
	tools)
		if [ "$to" != tools ] && [ "$target" != api/kvflash.h ]; then
			why="tools/ may include only the public kvflash.h, not $target"
		fi ;;
	bench)
		case $to in
		tools | mpi) why="bench/ must not include $to/ ($target)" ;;
		esac ;;
	api)
		if [ "$file" = api/kvflash.h ]; then
			why="the public kvflash.h must include no project header ($target)"
		elif in_list "$file" "$api_base_files" && [ "$to" != api ]; then
			why="the api base may include only api/ headers, not $target"
		else
			case $to in
			mpi | tools | bench) why="api/ must not include $to/ ($target)" ;;
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
	[ -d "$l" ] && find "$l" -path mpi/tests -prune -o -type f \( -name '*.c' -o -name '*.h' \) -print
done | LC_ALL=C sort)
py_files=$(cd "$root" && [ -d python/kvflash ] &&
	find python/kvflash -maxdepth 1 -type f -name '*.py' | LC_ALL=C sort)
# every include of a project file, "FILE TARGET LINE", for the order and
# the circles (section 2 and 3)
edges=""
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
		edges+="$f $target $line"$'\n'
		why_not "$f" "$target"
		if [ -n "$why" ]; then
			problem "$f:$line: $why"
		else
			passed=$((passed + 1))
		fi
	done < <(grep -nE '^[[:space:]]*#[[:space:]]*include' "$root/$f")
done

# only _lib.py loads the C library (and _lib_mpi.py the optional
# kvflash_mpi, which kvflash.mpi alone uses)
for f in $py_files; do
	case $f in
	python/kvflash/_lib.py | python/kvflash/_lib_mpi.py) continue ;;
	esac
	while IFS= read -r hit; do
		[ -n "$hit" ] || continue
		problem "$f:${hit%%:*}: only python/kvflash/_lib.py loads the C library (_lib_mpi.py the optional kvflash_mpi); call it through _lib.lib"
	done < <(grep -nE '(CDLL|cdll|LoadLibrary|find_library)' "$root/$f")
	passed=$((passed + 1))
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

# ---- 2 and 3: the order inside each folder, and no circle ----------------
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT

# order_lines DOC BEGIN END PREFIX GROUP - the order between the markers as
# "GROUP UNIT DOC" lines, lowest first; a line "LABEL: a b" names
# PREFIX LABEL/a and PREFIX LABEL/b (a label may come back on a later line
# to go on); GROUP "" takes the label as the group
order_lines() {
	sed -n "/<!-- $2 -->/,/<!-- $3 -->/p" "$root/$1" 2>/dev/null |
		awk -v prefix="$4" -v group="$5" -v doc="$1" '
		/^[[:space:]]*[a-z][a-z_\/]*:/ {
			sub(/^[[:space:]]+/, ""); label = $1; sub(/:$/, "", label)
			for (i = 2; i <= NF; i++)
				print (group != "" ? group : label), prefix label "/" $i, doc
		}'
}
order_lines docs/store.md "engine-order: begin" "engine-order: end" engine/ engine >"$tmp/order"
if [ ! -s "$tmp/order" ]; then
	problem "docs/store.md:1: no engine order between <!-- engine-order: begin --> and <!-- engine-order: end -->"
fi
order_lines docs/architecture.md "folder-order: begin" "folder-order: end" "" "" >"$tmp/folders"
if [ ! -s "$tmp/folders" ]; then
	problem "docs/architecture.md:1: no folder order between <!-- folder-order: begin --> and <!-- folder-order: end -->"
fi
cat "$tmp/folders" >>"$tmp/order"
printf '%s' "$edges" >"$tmp/incs"
for f in $files $py_files; do echo "$f"; done >"$tmp/files"

for f in $(cd "$root" && ls engine/*.[ch] 2>/dev/null); do
	problem "$f:1: engine/ holds only level folders; move $f into the folder of its level"
done

# every .c and .py file of an ordered folder is in its order, and every
# file the orders name exists
while read -r group unit doc; do
	if [ -f "$root/$unit.c" ] || [ -f "$root/$unit.py" ]; then
		passed=$((passed + 1))
	else
		problem "$doc:1: the order of $group/ names $unit, which is no .c or .py file"
	fi
done <"$tmp/order"
ordered_dirs=$(awk '{ d = $2; sub(/\/[^\/]*$/, "", d); print d }' "$tmp/order" | LC_ALL=C sort -u)
for f in $files $py_files; do
	case $f in
	*.c | *.py) ;;
	*) continue ;;
	esac
	d=${f%/*}
	u=${f%.*}
	if in_list "$d" "$ordered_dirs" || [[ $f == engine/*/*.c ]]; then
		if grep -q " $u " "$tmp/order"; then
			passed=$((passed + 1))
		elif [[ $f == engine/* ]]; then
			problem "$f:1: $f is not in the engine order of docs/store.md (a file sits in the folder of its level)"
		else
			problem "$f:1: $f is not in the order of ${d}/ in docs/architecture.md"
		fi
	fi
done

(cd "$root" && awk -v ORDER="$tmp/order" -v INCS="$tmp/incs" -v FILES="$tmp/files" '
	function unit(f) { sub(/\.(c|h|py)$/, "", f); return f }
	function dir(f) { sub(/\/[^\/]*$/, "", f); return f }
	# edge - F (line ln) depends on file T: kind inc, call or imp
	function edge(F, T, ln, kind, what) {
		ne++; e_src[ne] = F; e_dst[ne] = T; e_ln[ne] = ln
		e_kind[ne] = kind; e_what[ne] = what
	}
	# the group (ordered folder) of file f, or ""
	function group_of(f, u) {
		u = unit(f)
		if (u in grp)
			return grp[u]
		return (dir(f) in folder_grp) ? folder_grp[dir(f)] : ""
	}
	# a header with no .c of its own in an ordered folder
	function is_free(f) {
		return f ~ /\.h$/ && !((unit(f) ".c") in exists) &&
		       group_of(f) != "" && !(unit(f) in rank)
	}
	# the place of file f in its order: its module'"'"'s, or computed for a
	# free header; -1 when it has none
	function eff(f) {
		if (unit(f) in rank)
			return rank[unit(f)]
		if (is_free(f))
			return free[f] + 0
		return -1
	}
	# the module of file f (a .c or .py file, or the header of a .c
	# beside it), or "" for a header with no .c of its own
	function module(f) {
		if (f ~ /\.(c|py)$/ || (unit(f) ".c") in exists)
			return unit(f)
		return ""
	}
	# the node of file f in the graph of circles
	function node_of(f) {
		if (module(f) != "")
			return module(f)
		return (f in part_of) ? part_of[f] : unit(f)
	}
	function link(u, v, why) {
		if (u == v || ((u, v) in adj_why))
			return
		adj_why[u, v] = why
		adj[u, ++nadj[u]] = v
		if (!(u in node)) { node[u] = 1; nodes[++nn] = u }
	}
	function why_of(k) {
		if (e_kind[k] == "inc")
			return e_src[k] ":" e_ln[k] " includes " e_dst[k]
		if (e_kind[k] == "call")
			return e_src[k] ":" e_ln[k] " calls " e_what[k] "()"
		return e_src[k] ":" e_ln[k] " imports " e_what[k]
	}
	function dfs(u, i, v) {
		color[u] = 1; stack[++sp] = u
		for (i = 1; i <= nadj[u]; i++) {
			v = adj[u, i]
			if (color[v] == 1)
				circle(v, u, i)
			else if (color[v] == 0)
				dfs(v)
		}
		sp--; color[u] = 2
	}
	# circle - the back edge u -> v (the i-th of u) closes a circle
	function circle(v, u, i, j, from, path, ties, key, members, n, m) {
		for (j = sp; j > 0 && stack[j] != v; j--)
			;
		path = ""; ties = ""; n = 0
		for (; j <= sp; j++) {
			from = stack[j]
			m[++n] = from
			path = path from " -> "
		}
		path = path v
		for (j = 1; j <= n; j++)
			ties = ties (j > 1 ? "; " : "") adj_why[m[j], (j < n ? m[j + 1] : v)]
		# one report per set of members
		key = ""
		for (j = 1; j <= n; j++)
			members[j] = m[j]
		asort_simple(members, n)
		for (j = 1; j <= n; j++)
			key = key " " members[j]
		if (key in seen_circle)
			return
		seen_circle[key] = 1
		split(adj_why[m[n], v], first, " ")
		printf "%s: circle: %s (%s)\n", first[1], path, ties
	}
	function asort_simple(a, n, i, j, t) {
		for (i = 2; i <= n; i++)
			for (j = i; j > 1 && a[j - 1] > a[j]; j--) {
				t = a[j]; a[j] = a[j - 1]; a[j - 1] = t
			}
	}
	BEGIN {
		while ((getline l < ORDER) > 0) {
			split(l, a, " ")
			n_ord++; grp[a[2]] = a[1]; rank[a[2]] = n_ord; doc[a[1]] = a[3]
			folder_grp[dir(a[2])] = a[1]
		}
		while ((getline l < FILES) > 0)
			exists[l] = 1
		while ((getline l < INCS) > 0) {
			split(l, a, " ")
			edge(a[1], a[2], a[3], "inc", a[2])
		}
	}
	FNR == 1 {
		F = FILENAME; in_comment = 0
		isc = F ~ /\.c$/; isp = F ~ /\.py$/
		files[++nf] = F
	}
	isp {
		s = $0; mods = ""
		if (s ~ /^[[:space:]]*from[[:space:]]+\.[A-Za-z_][A-Za-z0-9_]*[[:space:]]+import[[:space:]]/) {
			sub(/^[[:space:]]*from[[:space:]]+\./, "", s); sub(/[[:space:]].*/, "", s); mods = s
		} else if (s ~ /^[[:space:]]*from[[:space:]]+kvflash\.[A-Za-z_][A-Za-z0-9_]*[[:space:]]+import[[:space:]]/ ||
			   s ~ /^[[:space:]]*import[[:space:]]+kvflash\.[A-Za-z_]/) {
			sub(/^[[:space:]]*(from|import)[[:space:]]+kvflash\./, "", s); sub(/[^A-Za-z0-9_].*/, "", s); mods = s
		} else if (s ~ /^[[:space:]]*from[[:space:]]+(\.|kvflash)[[:space:]]+import[[:space:]]/) {
			sub(/^[[:space:]]*from[[:space:]]+(\.|kvflash)[[:space:]]+import[[:space:]]+/, "", s)
			sub(/#.*/, "", s); gsub(/[()\\]/, "", s)
			n = split(s, parts, ",")
			for (i = 1; i <= n; i++) {
				p = parts[i]; sub(/^[[:space:]]+/, "", p); sub(/[[:space:]].*/, "", p)
				if (p != "")
					mods = mods " " p
			}
		}
		n = split(mods, parts, " ")
		for (i = 1; i <= n; i++) {
			T = dir(F) "/" parts[i] ".py"
			if (T in exists)
				edge(F, T, FNR, "imp", parts[i])
		}
		next
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
		if (out ~ /^[[:space:]]*#/)
			out = ""
		code[F, FNR] = out; lines[F] = FNR
		# a declarator at column 0: its name is no call; a definition
		# (no ";") in a .c file that is not static is a target
		if (out ~ /^[A-Za-z_]/ && out !~ /^(typedef|extern)[^A-Za-z0-9_]/ &&
		    match(out, /[A-Za-z_][A-Za-z0-9_]*\(/)) {
			name = substr(out, RSTART, RLENGTH - 1)
			declared[F, FNR] = name
			if (out !~ /;[[:space:]]*$/) {
				local[F, name] = 1
				if (isc && out !~ /^(static|_)/ && out !~ /^[A-Z_][A-Z0-9_]*INLINE[[:space:]]/) {
					ndef[name]++; def[name] = F
				}
			}
		}
	}
	END {
		# calls
		for (k = 1; k <= nf; k++) {
			F = files[k]
			if (F !~ /\.c$/)
				continue
			for (ln = 1; ln <= lines[F]; ln++) {
				s = code[F, ln]; skip = declared[F, ln]
				while (match(s, /[A-Za-z_][A-Za-z0-9_]*[[:space:]]*\(/)) {
					name = substr(s, RSTART, RLENGTH)
					prev = RSTART > 1 ? substr(s, RSTART - 1, 1) : ""
					sub(/[[:space:]]*\($/, "", name)
					s = substr(s, RSTART + RLENGTH)
					if (skip != "" && name == skip) {
						skip = ""
						continue
					}
					if (prev == "." || prev == ">" || (F, name) in local ||
					    ndef[name] != 1 || def[name] == F)
						continue
					if (!((F, name) in called)) {
						called[F, name] = 1
						edge(F, def[name], ln, "call", name)
					}
				}
			}
		}
		# free headers: as high as the highest module they reach
		do {
			changed = 0
			for (k = 1; k <= ne; k++) {
				F = e_src[k]; T = e_dst[k]
				if (!is_free(F) || group_of(T) != group_of(F))
					continue
				r = eff(T)
				if (r > free[F] + 0) {
					free[F] = r; free_why[F] = unit(T); changed = 1
				}
			}
		} while (changed)
		# nothing goes up the order
		for (k = 1; k <= ne; k++) {
			F = e_src[k]; T = e_dst[k]; g = group_of(F)
			if (g == "" || is_free(F) || group_of(T) != g || unit(F) == unit(T))
				continue
			rf = eff(F); rt = eff(T)
			if (rf < 0 || rt <= rf || ((F, unit(T)) in told))
				continue
			told[F, unit(T)] = 1
			how = is_free(T) ? " (a header with no .c is as high as what it includes: " free_why[T] ")" : ""
			if (e_kind[k] == "inc")
				printf "%s:%d: includes %s, which comes after it in the order of %s/ (%s)%s\n", F, e_ln[k], T, g, doc[g], how
			else if (e_kind[k] == "call")
				printf "%s:%d: calls %s() of %s, which comes after it in the order of %s/ (%s)\n", F, e_ln[k], e_what[k], T, g, doc[g]
			else
				printf "%s:%d: imports %s, which comes after it in the order of %s/ (%s)\n", F, e_ln[k], e_what[k], g, doc[g]
		}
		# no circle among the modules: a header with no .c is a node of
		# its own, unless it is a module'"'"'s private header, MODULE_int.h
		# or MODULE_impl.h beside MODULE.h, which it includes
		for (k = 1; k <= ne; k++) {
			H = e_src[k]; T = e_dst[k]; m = module(T)
			if (e_kind[k] != "inc" || module(H) != "" || m == "" ||
			    dir(H) != dir(T))
				continue
			hb = unit(H); sub(/.*\//, "", hb); mb = m; sub(/.*\//, "", mb)
			if (hb == mb "_int" || hb == mb "_impl")
				part_of[H] = m
		}
		for (k = 1; k <= ne; k++)
			link(node_of(e_src[k]), node_of(e_dst[k]), why_of(k))
		for (k = 1; k <= nn; k++)
			if (color[nodes[k]] == 0)
				dfs(nodes[k])
		printf "\n"
	}' $(cat "$tmp/files")) >"$tmp/found" 2>"$tmp/err"
rc=$?
if [ $rc -ne 0 ] || [ -s "$tmp/err" ]; then
	problem "tests/check-layers.sh:1: the order and circle check did not run (awk exit $rc): $(head -c 300 "$tmp/err")"
fi
while IFS= read -r line; do
	[ -n "$line" ] || continue
	problem "$line"
done <"$tmp/found"
passed=$((passed + 1))

echo "check-layers: $n_files files, $n_includes includes: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
