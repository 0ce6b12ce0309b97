#!/bin/sh
# readme_sketch.sh - the C sketch in README.md's "Embedding kvflash in an
# inference engine" is serve() of examples/engine_ops.c, byte for byte.
# Usage: tests/cli/readme_sketch.sh SOURCE_DIR
src=${1:?usage: readme_sketch.sh SOURCE_DIR}
tmp=${TMPDIR:-/tmp}/readme_sketch.$$
trap 'rm -f "$tmp".a "$tmp".b' EXIT
sed -n '/^static void serve(/,/^}$/p' "$src/examples/engine_ops.c" >"$tmp.a"
sed -n '/^static void serve(/,/^}$/p' "$src/README.md" >"$tmp.b"
if [ ! -s "$tmp.a" ] || ! cmp -s "$tmp.a" "$tmp.b"; then
	echo "readme_sketch: README.md's sketch differs from serve() in examples/engine_ops.c:" >&2
	diff "$tmp.a" "$tmp.b" >&2
	exit 1
fi
echo "readme_sketch: README.md's sketch is serve() of examples/engine_ops.c"
