"""Store lifecycle, sequences, options, stats and errors."""

import os
import time

import numpy as np
import pytest
import torch

import kvflash


def test_context_manager_closes_and_reopens(tmp_path):
    path = os.path.join(tmp_path, "s")
    k = torch.randn(50, 2, 64).half()
    v = torch.randn(50, 2, 64).half()
    with kvflash.Store(path, n_layers=2, n_q_heads=8, n_kv_heads=2,
                       head_dim=64, dtype=torch.float16) as st:
        assert not st.closed
        st.seq_create(7)
        st.append(7, 1, k, v)
    assert st.closed
    with pytest.raises(kvflash.Closed) as e:
        st.seq_len(7, 1)
    assert e.value.status == 16 and "seq_len: the store is closed" in \
        e.value.message
    # reopen with the stored shape, no shape given
    with kvflash.Store(path) as st2:
        assert (st2.n_layers, st2.n_q_heads, st2.n_kv_heads, st2.head_dim,
                st2.dtype) == (2, 8, 2, 64, "f16")
        assert st2.seq_list() == [7]
        assert st2.seq_len(7, 1) == 50 and st2.seq_len(7, 0) == 0
        rk, rv = st2.read(7, 1, 1)
        assert isinstance(rk, torch.Tensor)
        assert torch.equal(rk, k[:, 1]) and torch.equal(rv, v[:, 1])
    # a shape that contradicts the stored one is refused
    with pytest.raises(kvflash.Mismatch) as e:
        kvflash.Store(path, n_layers=3, n_q_heads=8, n_kv_heads=2,
                      head_dim=64, dtype=torch.float16)
    assert e.value.status == 14 and "n_layers" in e.value.message


def test_sequences(make_store):
    st = make_store(media="memory")
    st.seq_create(1)
    with pytest.raises(kvflash.Exists) as e:
        st.seq_create(1)
    assert e.value.status == 13 and "sequence 1" in e.value.message
    k = torch.randn(40, 2, 64).half()
    st.append(1, 0, k, k)
    with pytest.raises(kvflash.OutOfRange) as e:
        st.seq_fork(1, 2, 33)
    assert "layer 1 has 0 tokens" in e.value.message
    st.append(1, 1, k, k)
    st.seq_fork(1, 2, 33)
    assert st.seq_len(2, 0) == 33
    assert st.seq_info(2)["parent"] == 1
    st.seq_free(1)
    assert st.seq_list() == [2]
    with pytest.raises(kvflash.NotFound) as e:
        st.seq_len(1, 0)
    assert e.value.status == 12 and \
        e.value.message == "kvf_seq_len: sequence 1 does not exist"
    assert isinstance(e.value, KeyError) and isinstance(e.value, kvflash.Error)
    with pytest.raises(kvflash.OutOfRange) as e:
        st.seq_len(2, 5)
    assert "layer 5 out of range (store has 2 layers)" in e.value.message
    with pytest.raises(kvflash.InvalidArgument):
        st.seq_create(-1)


def test_options_and_bad_options(make_store, tmp_path):
    st = make_store(media="memory", page_size=8192, kt_pages=1,
                    segment_size=1 << 20, capacity_bytes=64 << 20)
    info = st.info()
    assert info["page_size"] == 8192 and info["kt_pages"] == 1
    assert info["capacity_bytes"] == 64 << 20 and info["media"] == 1
    with pytest.raises(kvflash.InvalidArgument) as e:
        make_store(name="t", pages=3)
    assert "unknown option 'pages'" in e.value.message
    with pytest.raises(kvflash.InvalidArgument) as e:
        make_store(name="u", media="tape")
    with pytest.raises(kvflash.InvalidArgument) as e:
        make_store(name="v", page_size=1000)
    assert e.value.status == 10 and "page_size" in e.value.message
    with pytest.raises(kvflash.InvalidArgument) as e:
        kvflash.Store(os.path.join(tmp_path, "w"), n_layers=1, n_q_heads=1,
                      n_kv_heads=1, head_dim=64, dtype=torch.int8)
    assert "torch.int8" in e.value.message
    assert not os.path.exists(os.path.join(tmp_path, "w", "KVFLASH"))


def test_dtype_names_and_numpy_kind(make_store):
    st = make_store(dtype="f32", media="memory")
    assert st.dtype == "f32" and st.kind == "numpy"
    st.seq_create(0)
    k = np.random.rand(3, 2, 64).astype(np.float32)
    st.append(0, 0, k, k)
    rk, _ = st.read(0, 0, 0)
    assert isinstance(rk, np.ndarray) and np.array_equal(rk, k[:, 0])
    st2 = make_store(dtype=np.float16, name="n", media="memory")
    assert st2.dtype == "f16"


def test_stats_and_sync(make_store):
    st = make_store()
    st.seq_create(3)
    k = torch.randn(100, 2, 64).half()
    st.append(3, 0, k, k)
    st.sync()
    s = st.stats()
    assert s["user_bytes"] == 100 * 2 * 64 * 2 * 2
    assert s["n_sequences"] == 1 and s["n_syncs"] >= 1
    assert s["host_bytes_written"] >= s["user_bytes"]


def test_error_classes():
    e = kvflash.errors.error(31, "kvf_append: full")
    assert isinstance(e, kvflash.NoSpace) and e.status == 31
    assert str(e) == "kvf_append: full (KVF_ENOSPC)"
    assert kvflash.status_name(41) == "KVF_ECORRUPT"
    assert kvflash.version().count(".") == 2


def test_reopen_with_options_takes_the_stored_shape(tmp_path):
    path = os.path.join(tmp_path, "r")
    with kvflash.Store(path, n_layers=1, n_q_heads=4, n_kv_heads=4,
                       head_dim=64, dtype="bf16", capacity_bytes=256 << 20,
                       segment_size=256 << 10) as st:
        st.seq_create(1)
    # runtime options only: the shaping ones come from the store
    with kvflash.Store(path, n_threads=1, verify_reads=1) as st:
        info = st.info()
        assert info["capacity_bytes"] == 256 << 20
        assert info["segment_size"] == 256 << 10 and st.dtype == "bf16"
        assert st.seq_list() == [1]
    # a read-only handle
    with kvflash.Store(path, read_only=1) as st:
        with pytest.raises(kvflash.NotSupported) as e:
            st.seq_create(2)
        assert "read-only" in e.value.message


def test_capacity_is_a_limit_not_an_allocation(tmp_path):
    path = os.path.join(tmp_path, "c")
    with kvflash.Store(path, n_layers=1, n_q_heads=4, n_kv_heads=4,
                       head_dim=64, dtype="f16", capacity_bytes=8 << 30):
        stripe = os.path.join(path, "stripe-000.kvf")
        st_ = os.stat(stripe)
        assert st_.st_size == 8 << 30            # the geometry, sparse
        assert st_.st_blocks * 512 <= 65 << 20   # 64 MiB allocated


def test_full_store_raises_nospace_and_frees(tmp_path):
    path = os.path.join(tmp_path, "f")
    with kvflash.Store(path, n_layers=1, n_q_heads=2, n_kv_heads=2,
                       head_dim=64, dtype="f16", media="memory",
                       segment_size=64 << 10,
                       capacity_bytes=1 << 20) as st:
        st.seq_create(1)
        k = torch.randn(512, 2, 64).half()
        with pytest.raises(kvflash.NoSpace) as e:
            for _ in range(64):
                st.append(1, 0, k, k)
        assert e.value.status == 31 and "full of live data" in e.value.message
        n = st.seq_len(1, 0)
        st.seq_free(1)
        st.sync()
        st.seq_create(2)
        st.append(2, 0, k, k)
        assert n > 0 and st.seq_len(2, 0) == 512


def test_prefetch_reads_a_layer_into_the_tier(tmp_path):
    path = os.path.join(tmp_path, "p")
    k = torch.randn(512, 2, 64).half()
    with kvflash.Store(path, n_layers=2, n_q_heads=8, n_kv_heads=2,
                       head_dim=64, dtype=torch.float16) as st:
        st.seq_create(1)
        st.append(1, 1, k, k)
    with kvflash.Store(path, dram_budget=64 << 20) as st:
        st.prefetch(1, 1)
        for _ in range(10000):
            if st.stats()["prefetch_pages"] > 0:
                break
            time.sleep(0.001)
        assert st.stats()["prefetch_pages"] > 0
        with pytest.raises(kvflash.NotFound):
            st.prefetch(9, 0)
        with pytest.raises(kvflash.Error) as e:
            st.prefetch(1, 2)
        assert "layer" in e.value.message
