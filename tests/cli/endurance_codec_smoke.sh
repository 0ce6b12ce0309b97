#!/bin/sh
# endurance_codec_smoke.sh KVBENCH DIR - kvbench endurance --codec at a
# small size: kvflash and kvflash-admit once uncompressed and once per
# codec asked (rows kvflash-int4, kvflash-admit-int4), the baseline once,
# uncompressed ("codec": "none"); every run succeeds; an INT4 row's sealed
# groups take under 0.4x the bytes of its uncompressed row's (0.29x at
# most; the exact tails a sync writes are beside them, padding_bytes); a
# codec that does not exist is refused.
set -eu
kvbench=$1 dir=$2
out=$dir.json
"$kvbench" endurance --dir "$dir" --quiet --json --layers 2 --q-heads 4 \
	--kv-heads 2 --head-dim 64 --steps 60 --rate 0.2 --on-prompt 32 \
	--on-gen 48 --convs 3 --turns 2 --chat-prompt 16 --chat-gen 48 \
	--think 5 --sync-every 8 --admit-tokens 64 --workloads online,chat \
	--systems kvflash,kvflash-admit,rocksdb-tuned --codec none,int4 > "$out"
if "$kvbench" endurance --dir "$dir" --quiet --codec int3 2>/dev/null; then
	echo "--codec int3 accepted"
	exit 1
fi
python3 - "$out" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert len(r) == 10, len(r)
assert all(x["ok"] == 1 for x in r), [x.get("error") for x in r]
rows = {(x["workload"], x["system"]): x for x in r}
for wl in ("online", "chat"):
    for s in ("kvflash", "kvflash-admit"):
        plain, coded = rows[(wl, s)], rows[(wl, s + "-int4")]
        assert plain["codec"] == "none" and coded["codec"] == "int4"
        assert coded["data_bytes"] < 0.4 * plain["data_bytes"], (wl, s)
        assert coded["padding_bytes"] > 0
        assert coded["user_bytes"] == plain["user_bytes"]
    assert rows[(wl, "rocksdb-tuned")]["codec"] == "none"
print("codec-rows-ok")
PY
