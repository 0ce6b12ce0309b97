#!/bin/bash
# check-layers-fails.sh - check-layers.sh must catch what it is there for:
# on copies of the tree, each with one fault put in (an upward include, an
# upward call, an upward import, a circle in a folder with no stated
# order, the engine's old include circle, a folder rule broken, a file
# missing from its order), it must fail and name the fault; on the clean
# copy it must pass, so the failures come from the faults.
#
# Usage: tests/check-layers-fails.sh SOURCE_ROOT
set -u

if [ $# -ne 1 ] || [ ! -d "$1" ]; then
	echo "usage: $0 SOURCE_ROOT" >&2
	exit 2
fi
src=$(cd "$1" && pwd -P) || exit 2
check=$src/tests/check-layers.sh
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT
tree=$tmp/tree
bad=0

copy() {
	rm -rf "$tree" && mkdir "$tree" &&
		(cd "$src" && cp -r api engine ftl compute mpi tools bench python docs "$tree/")
}

# expect NAME PATTERN - the check on the faulty copy fails (status 1) and
# prints a line matching the extended regex PATTERN
expect() {
	local rc
	bash "$check" "$tree" >"$tmp/out" 2>&1
	rc=$?
	if [ $rc -eq 1 ] && grep -Eq -- "$2" "$tmp/out"; then
		echo "ok: $1: $(grep -E -m1 -- "$2" "$tmp/out")"
	else
		echo "FAILED: $1: exit $rc, no line matching '$2':"
		sed 's/^/    /' "$tmp/out"
		bad=$((bad + 1))
	fi
}

copy || exit 2
if ! bash "$check" "$tree" >"$tmp/out" 2>&1; then
	echo "FAILED: the unchanged copy does not pass:"
	cat "$tmp/out"
	exit 1
fi
echo "ok: the unchanged copy passes"

copy
echo '#include "ftl/nand.h"' >>"$tree/ftl/sysio.c"
expect "upward include in ftl/" '^ftl/sysio\.c:[0-9]+: includes ftl/nand\.h, which comes after it in the order of ftl/'

copy
printf '\nconst char *attn_kernel_name(void)\n{\n\treturn kvc_kernels()->name;\n}\n' >>"$tree/compute/attn.c"
expect "upward call in compute/" '^compute/attn\.c:[0-9]+: calls kvc_kernels\(\) of compute/dispatch\.c, which comes after it'

copy
printf '\nint common_info(const struct cmd *c)\n{\n\treturn cmd_info(c, 0, NULL);\n}\n' >>"$tree/tools/kvtool_common.c"
expect "circle in tools/ (no stated order)" 'circle: tools/kvtool_(common|info) -> tools/kvtool_(info|common) -> '

copy
printf '\nfrom .store import Store  # noqa\n' >>"$tree/python/kvflash/_check.py"
expect "upward import in python/" '^python/kvflash/_check\.py:[0-9]+: imports store, which comes after it'

copy
printf '\n_dll = ctypes.CDLL("libkvflash.so")\n' >>"$tree/python/kvflash/plan.py"
expect "the C library loaded outside _lib.py" '^python/kvflash/plan\.py:[0-9]+: only python/kvflash/_lib\.py loads the C library'

copy
sed -i 's|#include "engine/base/fatal_state.h"|#include "engine/base/fatal.h"|' "$tree/engine/base/store_state.h"
expect "the engine's include circle (fatal.c, store_state.h, fatal.h)" 'circle: engine/base/(fatal|store_state) -> engine/base/(store_state|fatal) -> '

copy
sed -i '0,/#include "mpi_int.h"/s//#include "mpi_int.h"\n#include "api\/status.h"/' "$tree/mpi/mpi_ops.c"
expect "mpi/ including more than kvflash.h" '^mpi/mpi_ops\.c:[0-9]+: mpi/ may include only the public kvflash\.h'

copy
printf '/* a new module */\n' >"$tree/ftl/ftl_extra.c"
expect "an ftl/ file missing from its order" '^ftl/ftl_extra\.c:1: ftl/ftl_extra\.c is not in the order of ftl/'

if [ $bad -ne 0 ]; then
	echo "check-layers-fails: $bad fault(s) not caught"
	exit 1
fi
echo "check-layers-fails: every fault caught"
