"""Bad arguments to the Python package: each raises a kvflash.Error
subclass that names what was wrong, before anything is made or changed.
Integers the C structs cannot hold are refused, not wrapped to the
field's width; ranges past the end are refused before the output is
allocated."""

import os

import numpy as np
import pytest
import torch

import kvflash
from conftest import SHAPE


def test_integers_past_a_field_are_refused_not_wrapped(tmp_path):
    d = os.path.join(tmp_path, "s")
    cases = [dict(SHAPE, n_layers=2 ** 32 + 2),          # became 2
             dict(SHAPE, head_dim=2 ** 32 + 64),         # became 64
             dict(SHAPE, head_dim=-1),
             dict(SHAPE, page_size=2 ** 32 + 8192),      # became 8192
             dict(SHAPE, n_threads=2 ** 32 + 1),
             dict(SHAPE, n_layers=1.5),
             dict(SHAPE, n_layers="2")]
    for kw in cases:
        with pytest.raises(kvflash.InvalidArgument) as e:
            kvflash.Store(d, dtype="f16", **kw)
        bad = [k for k in kw if kw[k] != SHAPE.get(k)][0]
        assert bad in e.value.message
        assert not os.path.exists(d), kw
    with pytest.raises(kvflash.InvalidArgument, match="device_paths"):
        kvflash.Store(d, dtype="f16", device_paths="abc", **SHAPE)
    assert not any(os.path.exists(p) for p in ("a", "b", "c", d))
    with pytest.raises(kvflash.InvalidArgument, match="path"):
        kvflash.Store(3, dtype="f16", **SHAPE)


def test_options_without_a_shape_name_the_missing_store(tmp_path):
    with pytest.raises(kvflash.NotFound, match="holds no store"):
        kvflash.Store(os.path.join(tmp_path, "none"), dram_budget=1 << 20)


def test_ranges_past_the_end_are_refused_before_allocation(make_store):
    for kind in ("numpy", "torch"):
        st = make_store(name=kind, tensor=kind)
        st.seq_create(1)
        rows = np.ones((10, 2, 64), np.float16)
        st.append(1, 0, rows, rows)
        huge = 2 ** 40  # its output would be terabytes
        for call in (lambda: st.read(1, 0, 0, 0, huge),
                     lambda: st.h2o_read(1, 0, 0, 0, huge),
                     lambda: st.read_x(1, 0, 0, huge),
                     lambda: st.read(1, 0, 0, 0, 11)):
            with pytest.raises(kvflash.OutOfRange, match="past the end"):
                call()
        k, _ = st.read(1, 0, 0, 0, 10)
        assert tuple(k.shape) == (10, 64)


def test_empty_results_are_empty_for_torch_and_numpy(make_store):
    for kind in ("numpy", "torch"):
        st = make_store(name=kind, tensor=kind)
        st.seq_create(1)
        q = torch.ones(8, 64) if kind == "torch" else np.ones((8, 64),
                                                            np.float32)
        assert tuple(st.scores(1, 0, q).shape) == (8, 0)
        assert tuple(st.read_x(1, 0).shape) == (0, 8 * 64)
        assert tuple(st.read(1, 0, 0)[0].shape) == (0, 64)


def test_optimizer_and_batch_arguments(make_store):
    st = make_store(dtype=torch.float32)
    opt = st.opt_create("o", 10)
    with pytest.raises(kvflash.OutOfRange):
        opt.read(i0=20)
    with pytest.raises(kvflash.OutOfRange):
        opt.read(i0=5, n=6)
    with pytest.raises(kvflash.InvalidArgument):
        opt.read(n=-1)
    assert opt.read(i0=4).shape[0] == 6
    with pytest.raises(kvflash.InvalidArgument, match="name"):
        st.opt_create(5, 10)
    with pytest.raises(kvflash.InvalidArgument, match="lr"):
        st.opt_create("p", 10, lr="a")
    with pytest.raises(kvflash.InvalidArgument, match="beta1"):
        st.opt_create("p", 10, beta1=None)
    st.seq_create(1)
    rows = np.ones((3, 2, 64), np.float32)
    st.append(1, 0, rows, rows)
    q = np.ones((1, 8, 64), np.float32)
    out = st.attend_batch((s for s in [1]), 0, q)   # any iterable of ids
    assert np.allclose(out, st.attend_batch([1], 0, q))
    with pytest.raises(kvflash.InvalidArgument, match="seqs"):
        st.attend_batch(7, 0, q)


def test_reopen_with_options_on_device_paths(tmp_path):
    # the shape-less reopen peeks at the store read-only; on device_paths
    # the peek cannot find the stripes alone, and its refusal must not be
    # taken for the answer
    d = os.path.join(tmp_path, "s")
    devs = [os.path.join(tmp_path, "dev%d" % i) for i in range(2)]
    with kvflash.Store(d, dtype="f16", device_paths=devs, n_stripes=2,
                       capacity_bytes=64 << 20, **SHAPE) as st:
        st.seq_create(1)
        rows = np.ones((5, 2, 64), np.float16)
        st.append(1, 0, rows, rows)
    with kvflash.Store(d, device_paths=devs, n_stripes=2,
                       capacity_bytes=64 << 20, dram_budget=1 << 20) as st:
        assert st.seq_len(1, 0) == 5


def test_a_closed_torch_optimizer_refuses_to_step(make_store):
    import kvflash.torch as kt
    st = make_store(media="memory", n_layers=1, n_q_heads=1, n_kv_heads=1)
    p = torch.nn.Parameter(torch.ones(4))
    opt = kt.SGD([p], st, lr=0.1)
    opt.close()
    p.grad = torch.ones(4)
    with pytest.raises(kvflash.Closed):
        opt.step()
    assert torch.equal(p.detach(), torch.ones(4))
