#!/bin/bash
# kvtool.sh - end-to-end checks of kvtool's command line: exit codes,
# messages, and which stream each goes to.
#
# Usage: tests/cli/kvtool.sh PATH/TO/kvtool
#
# The contract checked here (see tools/kvtool.c and tools/kvtool.1):
# --help/-h/help print the usage to stdout and exit 0; --version prints
# "kvtool X.Y.Z" and exits 0; every command listed by --help answers
# `kvtool help CMD` and `kvtool CMD --help`; bad usage (unknown or missing
# command, unknown option, extra arguments) exits 2 with exactly one line on
# stderr naming the problem and nothing on stdout; a failed write of the
# output exits 1.  Each check counts once; the last line of output is
# "N passed, M failed", and the exit status is 1 if any check failed.
set -u

if [ $# -ne 1 ] || [ ! -x "$1" ]; then
	echo "usage: $0 PATH/TO/kvtool" >&2
	exit 2
fi
KVTOOL=$1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvtool-cli.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

# run, pass, fail, expect_rc, expect_no_stdout, expect_no_stderr,
# expect_stdout_has
. "$(dirname "$0")/checks.sh"

# expect_stdout_is TEXT - stdout is exactly TEXT plus a newline
expect_stdout_is() {
	if [ "$(cat "$tmp/out")" = "$1" ] && [ "$(tail -c 1 "$tmp/out")" = "" ] &&
	   [ "$(wc -l <"$tmp/out")" -eq "$(printf '%s\n' "$1" | wc -l)" ]; then
		pass
	else
		fail "stdout is not exactly '$1'"
	fi
}

# expect_one_stderr_line - stderr is one non-empty, newline-ended line
expect_one_stderr_line() {
	if [ "$(wc -l <"$tmp/err")" -eq 1 ] && [ -n "$err" ] &&
	   [ "$(tail -c 1 "$tmp/err")" = "" ]; then
		pass
	else
		fail "stderr is not exactly one line"
	fi
}

# expect_stderr_is TEXT - the one stderr line is exactly TEXT
expect_stderr_is() {
	if [ "$err" = "$1" ]; then pass; else fail "stderr, want '$1'"; fi
}

# expect_stderr_has TEXT - the stderr line contains TEXT (fixed string)
expect_stderr_has() {
	if grep -Fq -- "$1" "$tmp/err"; then
		pass
	else
		fail "stderr does not contain '$1'"
	fi
}

# usage_error WANT_LINE ARGS... - bad usage: exit 2, stdout empty, exactly
# one stderr line; WANT_LINE is the exact line, or "~TEXT" for a substring
usage_error() {
	want=$1
	shift
	run "$@"
	expect_rc 2
	expect_no_stdout
	expect_one_stderr_line
	case $want in
	"~"*) expect_stderr_has "${want#"~"}" ;;
	*) expect_stderr_is "$want" ;;
	esac
	case $err in
	"kvtool: "*) pass ;;
	*) fail "stderr line does not start with 'kvtool: '" ;;
	esac
}

# ---- help -----------------------------------------------------------------

run --help
expect_rc 0
expect_no_stderr
expect_stdout_has '^usage: kvtool '
expect_stdout_has '^commands:$'
expect_stdout_has '^  help +\[CMD\] +[a-z]'
expect_stdout_has '^  version +[a-z]'
expect_stdout_has '^  info +\[--json\] DIR +[a-z]'
expect_stdout_has '^  ls +\[--json\] DIR +[a-z]'
expect_stdout_has '^  segments +\[--all\] \[--json\] DIR +[a-z]'
expect_stdout_has '^  verify +\[--json\] DIR +[a-z]'
# a usage line too wide for the column puts its summary on the next line
expect_stdout_has '^  dump \[--json\] DIR --seq S --layer L --head H --tokens A:B \[--kind k\|v\|x\]$'
expect_stdout_has '^ {4,}print stored K, V or X values$'
expect_stdout_has '^  -h, --help '
expect_stdout_has '^  --version '
help_text=$out

for form in "-h" "help"; do
	run $form
	expect_rc 0
	expect_no_stderr
	if [ "$out" = "$help_text" ]; then
		pass
	else
		fail "differs from kvtool --help"
	fi
done

# every command --help lists answers help CMD, CMD --help and CMD -h alike
cmds=$(printf '%s\n' "$help_text" |
	sed -n '/^commands:$/,/^$/{/^  [a-z]/{s/^  \([a-z][a-z0-9-]*\).*/\1/;p}}')
if [ -n "$cmds" ]; then pass; else what="kvtool --help"; fail "lists no commands"; fi
for c in $cmds; do
	run help "$c"
	expect_rc 0
	expect_no_stderr
	expect_stdout_has "^kvtool $c - [a-z]"
	expect_stdout_has "^usage: kvtool $c( |\$)"
	cmd_help=$out
	for form in "$c --help" "$c -h" "--help $c"; do
		# shellcheck disable=SC2086
		run $form
		expect_rc 0
		expect_no_stderr
		if [ "$out" = "$cmd_help" ]; then
			pass
		else
			fail "differs from kvtool help $c"
		fi
	done
done

# ---- version --------------------------------------------------------------

run --version
expect_rc 0
expect_no_stderr
number=""
if [[ $out =~ ^kvtool\ ([0-9]+)\.([0-9]+)\.([0-9]+)$ ]]; then
	pass
	# the version number is MAJOR * 10000 + MINOR * 100 + PATCH
	number=$((10#${BASH_REMATCH[1]} * 10000 + 10#${BASH_REMATCH[2]} * 100 +
		10#${BASH_REMATCH[3]}))
else
	fail "stdout is not 'kvtool X.Y.Z'"
fi
expect_stdout_is "$out"
version=${out#kvtool }

run version
expect_rc 0
expect_no_stderr
expect_stdout_has "^kvtool $version\$"
expect_stdout_has "^libkvflash $version \\(version number [0-9]+\\)"
expect_stdout_has "^kvflash.h [0-9]+\\.[0-9]+\\.[0-9]+ \\(version number [0-9]+\\)"
expect_stdout_has "^libkvflash $version \\(version number ${number:-X}\\)"

# ---- bad usage: exit 2, one line on stderr, nothing on stdout -------------

usage_error "kvtool: unknown command 'frob' (kvtool --help lists commands)" frob
usage_error "kvtool: unknown command 'frob' (kvtool --help lists commands)" frob --help
usage_error "kvtool: unknown command 'fr ob' (kvtool --help lists commands)" "fr ob"
usage_error "kvtool: unknown command '' (kvtool --help lists commands)" ""
usage_error "kvtool: missing command (kvtool --help lists commands)"
usage_error "kvtool: missing command (kvtool --help lists commands)" --
usage_error "kvtool: unknown option '--frob' (kvtool --help lists options)" --frob
usage_error "kvtool: unknown option '-x' (kvtool --help lists options)" -x
usage_error "kvtool: unknown option '--frob' (kvtool --help lists options)" --help --frob
usage_error "kvtool: unknown option '--frob' (kvtool --help lists options)" --version --frob
usage_error "kvtool: unknown option '--frob' (kvtool --help lists options)" --frob version
usage_error "kvtool: unknown command 'frob' (kvtool --help lists commands)" help frob
usage_error "kvtool: unknown command 'frob' (kvtool --help lists commands)" --help frob
usage_error "~too many arguments" help version extra
usage_error "~unknown option '--frob'" help --frob
usage_error "kvtool: version: unexpected argument 'extra' (usage: kvtool version)" version extra
usage_error "kvtool: version: unknown option '--frob' (usage: kvtool version)" version --frob
usage_error "~'extra'" version --help extra
usage_error "~'extra'" --version extra

# ---- output that cannot be written ----------------------------------------

if [ -w /dev/full ]; then
	for args in "--help" "--version" "version" "help version"; do
		what="kvtool $args >/dev/full"
		# shellcheck disable=SC2086
		"$KVTOOL" $args >/dev/full 2>"$tmp/err"
		rc=$?
		: >"$tmp/out"
		err=$(cat "$tmp/err")
		expect_rc 1
		expect_one_stderr_line
		expect_stderr_has "writing to standard output"
	done
else
	echo "note: no writable /dev/full; write-error checks skipped"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
