"""Eviction from Python: the policy option, pins, evict and its log."""

import pytest
import torch

import kvflash


def fill(st, seq, tokens=64):
    st.seq_create(seq)
    k = torch.randn(tokens, 2, 64).half()
    st.append(seq, 0, k, k)
    st.append(seq, 1, k, k)
    return k


def test_lru_pins_and_log(make_store):
    st = make_store(evict_policy="lru", dram_budget=0,
                    capacity_bytes=4 << 20, segment_size=64 << 10)
    kept = {s: fill(st, s) for s in (1, 2, 3)}
    st.sync()
    st.seq_pin(1)
    freed = st.evict(1)
    assert freed == 2 * 2 * 2 * 2 * 4096  # 2 groups of 8 streams
    log = st.evict_log()
    assert [e["seq"] for e in log] == [2]
    assert log[0]["reason"] == "call" and log[0]["policy"] == "lru"
    assert st.evict_log() == []
    with pytest.raises(kvflash.NotFound) as e:
        st.seq_len(2)
    assert "evicted" in e.value.message
    st.evict(1, policy="lfu")  # 1 is pinned: 3 goes
    assert st.seq_list() == [1]
    st.seq_unpin(1)
    with pytest.raises(kvflash.InvalidArgument):
        st.seq_unpin(1)
    k, _ = st.read(1, 0, 1)
    assert torch.equal(k, kept[1][:, 1])
    s = st.stats()
    assert s["evicted_seqs"] == 2 and s["evict_runs"] == 2
    assert 0 < s["live_share"] < 1


def test_bad_policies_refused(make_store, tmp_path):
    with pytest.raises(kvflash.InvalidArgument) as e:
        make_store(evict_policy="random")
    assert "evict_policy" in e.value.message
    with pytest.raises(kvflash.InvalidArgument) as e:
        make_store(name="t", evict_policy="lru", evict_high=0.5,
                   evict_low=0.7)
    assert "0 < low < high <= 1" in e.value.message
    st = make_store(name="u")
    with pytest.raises(kvflash.InvalidArgument) as e:
        st.evict(1)  # no policy on this store
    assert "evict_policy" in e.value.message
