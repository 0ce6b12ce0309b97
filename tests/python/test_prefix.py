"""Prefix reuse and export/import through the Python package."""

import os

import numpy as np
import pytest
import torch

import kvflash

G = 32  # tokens a group: head_dim 64, f16, 4 KiB pages


def kv_of(ids, t0):
    """K and V of tokens ids[t0:] at their positions: [n, 2, 64] f16,
    a function of (id, position) only."""
    g = torch.Generator()
    rows_k, rows_v = [], []
    for i in range(t0, len(ids)):
        g.manual_seed(int(ids[i]) * 100003 + i)
        rows_k.append(torch.randn(2, 64, generator=g))
        rows_v.append(torch.randn(2, 64, generator=g))
    return torch.stack(rows_k).half(), torch.stack(rows_v).half()


def fill(st, seq, ids, t0):
    k, v = kv_of(ids, t0)
    for layer in range(2):
        st.append(seq, layer, k, v)


def store(path):
    return kvflash.Store(path, n_layers=2, n_q_heads=4, n_kv_heads=2,
                         head_dim=64, dtype=torch.float16)


def test_create_tokens_shares_the_longest_prefix(tmp_path):
    a = list(range(1, 3 * G + 6))
    b = a[:2 * G + 3] + [999] * 20
    with store(os.path.join(tmp_path, "s")) as st:
        assert st.seq_create_tokens(1, a) == 0
        fill(st, 1, a, 0)
        # numpy ids, divergence inside the third group
        assert st.seq_create_tokens(2, np.array(b, dtype=np.int64)) == 2 * G + 3
        fill(st, 2, b, 2 * G + 3)
        k, v = kv_of(b, 0)
        rk, rv = st.read(2, 1, 1)
        assert torch.equal(rk, k[:, 1]) and torch.equal(rv, v[:, 1])
        s = st.stats()
        assert s["prefix_lookups"] == 2 and s["prefix_hits"] == 1
        assert s["prefix_tokens_reused"] == 2 * G + 3
        info = st.seq_info(2)
        assert info["prefix_tokens"] == len(b)
        assert info["prefix_shared_chunks"] == 2
        # registered later: a plain sequence's ids
        st.seq_create(3)
        fill(st, 3, [7] * G, 0)
        st.seq_add_tokens(3, torch.tensor([7] * G))
        assert st.seq_create_tokens(4, [7] * G) == G


def test_bad_token_ids(tmp_path):
    with store(os.path.join(tmp_path, "s")) as st:
        with pytest.raises(kvflash.InvalidArgument):
            st.seq_create_tokens(1, [[1, 2]])
        with pytest.raises(kvflash.InvalidArgument):
            st.seq_create_tokens(1, [1.5])
        with pytest.raises(kvflash.InvalidArgument):
            st.seq_create_tokens(1, [-1])
        with pytest.raises(kvflash.NotFound):
            st.seq_add_tokens(5, [1])
        assert st.seq_list() == []


def test_export_import_round_trip(tmp_path):
    ids = list(range(100, 100 + 2 * G + 9))
    f = os.path.join(tmp_path, "seq.kvx")
    with store(os.path.join(tmp_path, "a")) as a:
        a.seq_create_tokens(5, ids)
        fill(a, 5, ids, 0)
        a.seq_export(5, f)
        with store(os.path.join(tmp_path, "b")) as b:
            assert b.seq_import(f) == 5
            assert b.seq_import(f, seq=9) == 9
            for layer in range(2):
                for h in range(2):
                    ka, va = a.read(5, layer, h)
                    kb, vb = b.read(9, layer, h)
                    assert torch.equal(ka, kb) and torch.equal(va, vb)
            # whole chunks are published; the 9-token tail is not one
            assert b.seq_create_tokens(10, ids) == 2 * G
            with pytest.raises(kvflash.Exists):
                b.seq_import(f)
            # damaged: nothing is left behind
            data = bytearray(open(f, "rb").read())
            data[len(data) // 2] ^= 0xff
            bad = os.path.join(tmp_path, "bad.kvx")
            open(bad, "wb").write(bytes(data))
            with pytest.raises(kvflash.Corrupt) as e:
                b.seq_import(bad, seq=11)
            assert "fails its checksum" in e.value.message
            assert 11 not in b.seq_list()
    with kvflash.Store(os.path.join(tmp_path, "c"), n_layers=3, n_q_heads=4,
                       n_kv_heads=2, head_dim=64, dtype="f16") as c:
        with pytest.raises(kvflash.Mismatch) as e:
            c.seq_import(f)
        assert "n_layers 2; this store has 3" in e.value.message


def test_cached_prefix_outlives_its_holder(tmp_path):
    """A freed conversation's chunks stay as a cached prefix: a later one
    hits on them, after a reopen too; prefix_drop gives them up."""
    ids = list(range(500, 500 + 3 * G + 7))
    path = os.path.join(tmp_path, "s")
    with store(path) as st:
        assert st.seq_create_tokens(1, ids) == 0
        fill(st, 1, ids, 0)
        st.seq_free(1)
        assert st.seq_list() == []
        cached = st.prefix_list()
        assert len(cached) == 1
        info = st.seq_info(cached[0])
        assert info["cached"] == 1 and info["cached_own_chunks"] == 3
        s = st.stats()
        assert s["prefix_cached"] == 1
        assert s["prefix_cached_bytes"] == 3 * 2 * 2 * 2 * G * 128
        # the caller's calls do not see it
        with pytest.raises(kvflash.NotFound) as e:
            st.seq_free(cached[0])
        assert "cached prefixes" in e.value.message
    with store(path) as st:
        assert st.prefix_list() == cached
        assert st.seq_create_tokens(2, ids) == 3 * G
        k, v = kv_of(ids, 0)
        rk, rv = st.read(2, 1, 0, 0, 3 * G)
        assert torch.equal(rk, k[:3 * G, 0]) and torch.equal(rv, v[:3 * G, 0])
        assert st.stats()["prefix_cache_hits"] == 1
        with pytest.raises(kvflash.NotFound):
            st.prefix_drop(2)  # the caller's, not a cached prefix
        with pytest.raises(kvflash.NotFound):
            st.prefix_drop(12345)
        assert st.prefix_drop(cached[0]) == 1
        assert st.prefix_drop() == 0
        assert st.prefix_list() == []
    # off: a free keeps nothing
    with kvflash.Store(os.path.join(tmp_path, "off"), n_layers=2,
                       n_q_heads=4, n_kv_heads=2, head_dim=64,
                       dtype=torch.float16, prefix_cache_bytes=0) as st:
        st.seq_create_tokens(1, ids)
        fill(st, 1, ids, 0)
        st.seq_free(1)
        assert st.prefix_list() == []
