#!/bin/bash
# run-python.sh ARGS... - run $KVF_PYTHON ARGS... when it has numpy, torch
# and pytest (Debian's python3-numpy, python3-torch, python3-pytest);
# exit 77 (skip) naming what is missing otherwise.
py=${KVF_PYTHON:-python3}
if ! missing=$("$py" -c '
import importlib.util as u
print(" ".join(m for m in ("numpy", "torch", "pytest") if u.find_spec(m) is None))' 2>&1); then
	echo "run-python.sh: $py does not run: $missing" >&2
	exit 77
fi
if [ -n "$missing" ]; then
	echo "run-python.sh: $py lacks $missing (apt-get install python3-numpy python3-torch python3-pytest); skipped" >&2
	exit 77
fi
exec "$py" "$@"
