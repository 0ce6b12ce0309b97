#!/bin/bash
# run_python_mpi.sh MPIEXEC SCRIPT DIR - run the Python SCRIPT on 4 ranks
# (kvflash.mpi's test) with $KVF_PYTHON, when it has numpy and mpi4py
# (Debian's python3-numpy, python3-mpi4py); exit 77 (skip) naming what is
# missing otherwise.  KVF_PY_PRELOAD, when set (the ASan build), is
# preloaded into the ranks only, not into mpiexec.
mpiexec=$1
script=$2
dir=$3
py=${KVF_PYTHON:-python3}
if ! missing=$("$py" -c '
import importlib.util as u
print(" ".join(m for m in ("numpy", "mpi4py") if u.find_spec(m) is None))' 2>&1); then
	echo "run_python_mpi.sh: $py does not run: $missing" >&2
	exit 77
fi
if [ -n "$missing" ]; then
	echo "run_python_mpi.sh: $py lacks $missing (apt-get install python3-numpy python3-mpi4py); skipped" >&2
	exit 77
fi
preload=()
if [ -n "${KVF_PY_PRELOAD:-}" ]; then
	preload=(-x "LD_PRELOAD=$KVF_PY_PRELOAD")
fi
exec "$mpiexec" -n 4 --oversubscribe "${preload[@]}" "$py" "$script" "$dir"
