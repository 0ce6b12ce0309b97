# checks.sh - what the kvtool command-line checks share (kvtool.sh,
# kvtool_store.sh source it after setting KVTOOL and making $tmp): running
# kvtool with its exit code and both streams captured, counting checks,
# and the checks both scripts make.  FAIL_STDOUT_LINES is how many lines of
# stdout a failure shows (default 5).  Each script ends with
# `echo "$passed passed, $failed failed"`.

passed=0
failed=0

# run ARGS... - run kvtool; sets $rc, $out, $err (files $tmp/out, $tmp/err)
run() {
	what="kvtool $*"
	"$KVTOOL" "$@" <"/dev/null" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	out=$(cat "$tmp/out")
	err=$(cat "$tmp/err")
}

pass() {
	passed=$((passed + 1))
}

fail() {
	failed=$((failed + 1))
	echo "FAIL: $what: $*"
	echo "  exit $rc"
	sed 's/^/  stdout: /' "$tmp/out" | head -"${FAIL_STDOUT_LINES:-5}"
	sed 's/^/  stderr: /' "$tmp/err" | head -5
}

expect_rc() {
	if [ "$rc" -eq "$1" ]; then pass; else fail "exit $rc, want $1"; fi
}

expect_no_stdout() {
	if [ ! -s "$tmp/out" ]; then pass; else fail "stdout not empty"; fi
}

expect_no_stderr() {
	if [ ! -s "$tmp/err" ]; then pass; else fail "stderr not empty"; fi
}

# expect_stdout_has REGEX - some line of stdout matches the ERE
expect_stdout_has() {
	if grep -Eq -- "$1" "$tmp/out"; then
		pass
	else
		fail "no stdout line matches /$1/"
	fi
}
