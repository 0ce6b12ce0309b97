"""kvflash.mpi under mpirun (4 ranks): the sharded store's collective calls
from Python against numpy references on the root, for both placements,
and the failures every rank must raise alike.

usage: mpirun -np 4 python3 test_mpi.py DIR

Each test runs on every rank in the same order (the calls are
collective).  A test that fails on any rank fails on all: the ranks
gather their outcomes after each test.  The root prints one line per test
and "N passed, N failed"; an unexpected error aborts the job (MPI_Abort),
so no rank waits forever in a collective.
"""

import os
import shutil
import sys
import traceback

import numpy as np
from mpi4py import MPI

import kvflash
import kvflash.mpi as kmpi

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
ROOT = 0
BASE = sys.argv[1] if len(sys.argv) > 1 else "mpi-py"
SHAPE = dict(n_layers=2, n_q_heads=8, n_kv_heads=4, head_dim=32)
SMALL = dict(media="memory", capacity_bytes=32 << 20, segment_size=256 << 10,
             n_threads=1, dram_budget=0)


def fresh(name):
    path = os.path.join(BASE, name)
    if rank == ROOT:
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path)
    comm.Barrier()
    return path


def kv(seed, n, dtype=np.float32):
    r = np.random.default_rng(seed)
    shape = (n, SHAPE["n_kv_heads"], SHAPE["head_dim"])
    return (r.standard_normal(shape).astype(dtype),
            r.standard_normal(shape).astype(dtype))


def reference(q, k, v):
    """softmax(q k / sqrt(d)) v per query head, in float64."""
    g = SHAPE["n_q_heads"] // SHAPE["n_kv_heads"]
    out = np.zeros(q.shape, np.float64)
    lse = np.zeros(q.shape[0], np.float64)
    for h in range(q.shape[0]):
        kh = k[:, h // g, :].astype(np.float64)
        s = kh @ q[h].astype(np.float64) / np.sqrt(SHAPE["head_dim"])
        m = s.max()
        p = np.exp(s - m)
        lse[h] = m + np.log(p.sum())
        out[h] = (p / p.sum()) @ v[:, h // g, :].astype(np.float64)
    return out, lse


def raises(cls, fn, *words):
    """fn() raises cls on this rank, its message holding every word."""
    try:
        fn()
    except cls as e:
        for w in words:
            assert w in e.message, "%r not in %r" % (w, e.message)
        return e
    raise AssertionError("%s not raised" % cls.__name__)


def roundtrip(shard, block_tokens=0):
    path = fresh("rt-" + shard)
    n = 100
    k, v = kv(1, n)
    with kmpi.ShardedStore(comm, path, dtype="f32", shard=shard,
                           block_tokens=block_tokens, tensor="numpy",
                           **SHAPE, **SMALL) as st:
        st.seq_create(7)
        for layer in range(SHAPE["n_layers"]):
            # two appends: the second starts mid-block (TOKEN)
            st.append(7, layer, *(x[:37] for x in (k, v)) if st.is_root
                      else (None, None))
            st.append(7, layer, *(x[37:] for x in (k, v)) if st.is_root
                      else (None, None))
        assert st.seq_len(7, 1) == n  # every rank gets it
        for h in range(SHAPE["n_kv_heads"]):
            got = st.read(7, 1, h, 5, 90)
            if st.is_root:
                assert np.array_equal(got[0], k[5:90, h]), "K of head %d" % h
                assert np.array_equal(got[1], v[5:90, h]), "V of head %d" % h
            else:
                assert got is None
        q = np.random.default_rng(2).standard_normal(
            (SHAPE["n_q_heads"], SHAPE["head_dim"])).astype(np.float32)
        res = st.attend(7, 0, q if st.is_root else None, lse=True)
        if st.is_root:
            out, lse = res
            want, want_lse = reference(q, k, v)
            assert np.abs(out - want).max() < 1e-4, np.abs(out - want).max()
            assert np.abs(lse - want_lse).max() < 1e-4
        else:
            assert res is None
        s = st.stats()
        assert s["n_ranks"] == comm.Get_size() and s["rank"] == rank
        assert s["shard"] == shard and s["append_calls"] == 4
        assert s["attend_calls"] == 1
        local = st.local_stats()
        assert local["n_sequences"] == 1
        assert local["user_bytes"] > 0  # every rank holds a share
        st.sync()
        st.seq_free(7)
        raises(kvflash.NotFound, lambda: st.seq_len(7, 0), "7")


def test_head_sharding():
    roundtrip("head")


def test_token_sharding():
    roundtrip("token", block_tokens=16)


def test_sparse_attention_by_heads():
    path = fresh("sparse")
    n = 400
    k, v = kv(3, n)
    with kmpi.ShardedStore(comm, path, dtype="f32", tensor="numpy",
                           kt_pages=1, **SHAPE, **SMALL) as st:
        st.seq_create(1)
        st.append(1, 0, k if st.is_root else None, v if st.is_root else None)
        q = np.random.default_rng(4).standard_normal(
            (SHAPE["n_q_heads"], SHAPE["head_dim"])).astype(np.float32)
        dense = st.attend(1, 0, q if st.is_root else None)
        # every token chosen: SparF gives dense attention's result
        full = st.attend(1, 0, q if st.is_root else None, sparse=1, top_k=n,
                         top_r=SHAPE["head_dim"])
        some = st.attend(1, 0, q if st.is_root else None, sparse=2,
                         top_k=n // 4)
        if st.is_root:
            want, _ = reference(q, k, v)
            assert np.abs(dense - want).max() < 1e-4
            assert np.abs(full - want).max() < 1e-3
            # SparF is per KV head: sharded by heads it chooses what one
            # store holding every head chooses
            with kvflash.Store(os.path.join(path, "one"), dtype="f32",
                               tensor="numpy", kt_pages=1, **SHAPE,
                               **SMALL) as one:
                one.seq_create(1)
                one.append(1, 0, k, v)
                alone = one.attend(1, 0, q, sparse=2, top_k=n // 4)
            assert np.abs(some - alone).max() < 1e-5, \
                np.abs(some - alone).max()
            assert np.abs(some - want).max() > 1e-3  # not dense


def test_failures_are_raised_on_every_rank():
    path = fresh("fail")
    with kmpi.ShardedStore(comm, path, dtype="f32", tensor="numpy",
                           **SHAPE, **SMALL) as st:
        st.seq_create(3)
        raises(kvflash.Exists, lambda: st.seq_create(3), "3")
        raises(kvflash.NotFound, lambda: st.seq_free(4), "4")
        k, v = kv(5, 8)
        # the root's tensor of the wrong shape, dtype, kind: every rank
        # raises the root's message, nothing is appended
        bad = k[:, :2] if st.is_root else None
        raises(kvflash.InvalidArgument,
               lambda: st.append(3, 0, bad, v if st.is_root else None),
               "shape [n_tokens, 4, 32]")
        raises(kvflash.InvalidArgument,
               lambda: st.append(3, 0, k.astype(np.float16) if st.is_root
                                 else None, v if st.is_root else None),
               "float16")
        raises(kvflash.InvalidArgument,
               lambda: st.append(3, 0, [1, 2] if st.is_root else None, None),
               "list")
        raises(kvflash.InvalidArgument, lambda: st.seq_len(-1), "-1")
        assert st.seq_len(3, 0) == 0
        raises(kvflash.OutOfRange,
               lambda: st.append(3, 9, k if st.is_root else None,
                                 v if st.is_root else None), "layer")
        raises(kvflash.InvalidArgument,
               lambda: st.attend(3, 0, np.zeros((3, 3), np.float32)
                                 if st.is_root else None), "q")
        raises(kvflash.OutOfRange,
               lambda: st.read(3, 0, 0, 0, 5), "past")
        # an end far past the length: refused before the output is made
        raises(kvflash.OutOfRange,
               lambda: st.read(3, 0, 0, 0, 2 ** 62 if st.is_root else None),
               "past")
        # an argument Python itself refuses on the root reaches every
        # rank (the others were left waiting in the collective)
        raises(kvflash.InvalidArgument,
               lambda: st.attend(3, 0, np.zeros((8, 32), np.float32)
                                 if st.is_root else None, scale="x"),
               "ValueError")
        # no tokens: nothing appended, no refusal
        st.append(3, 0, k[:0] if st.is_root else None,
                  v[:0] if st.is_root else None)
        assert st.seq_len(3, 0) == 0
        st.append(3, 0, k if st.is_root else None,
                  v if st.is_root else None)
        # the root's t1 decides; the others may leave it out
        got = st.read(3, 0, 0, 0, 5) if st.is_root else st.read(3, 0, 0)
        if st.is_root:
            assert got[0].shape == (5, 32) and np.array_equal(got[0], k[:5, 0])
        st.seq_free(3)
        st.seq_create(3)
        assert st.seq_len(3, 0) == 0
    raises(kvflash.Closed, lambda: st.seq_len(3, 0), "closed")
    st.close()  # a second close is a no-op
    # options every rank must agree on, checked against the stored ones
    raises(kvflash.Mismatch,
           lambda: kmpi.ShardedStore(comm, path, dtype="f32", shard="token",
                                     **SHAPE, **SMALL), "token")
    raises(kvflash.InvalidArgument,
           lambda: kmpi.ShardedStore(comm, path, dtype="f32", shard="rows",
                                     **SHAPE), "shard")
    raises(kvflash.InvalidArgument,
           lambda: kmpi.ShardedStore(comm, path, dtype="f32", colour=1,
                                     **SHAPE), "colour")


def test_reopen_keeps_synced_tokens():
    path = fresh("reopen")
    k, v = kv(6, 50)
    opts = dict(SMALL, media="file", direct_io=2)
    with kmpi.ShardedStore(comm, path, dtype="f32", tensor="numpy",
                           **SHAPE, **opts) as st:
        st.seq_create(11)
        st.append(11, 0, k if st.is_root else None, v if st.is_root else None)
        st.sync()
    with kmpi.ShardedStore(comm, path, dtype="f32", tensor="numpy",
                           **SHAPE, **opts) as st:
        assert st.seq_len(11, 0) == 50
        got = st.read(11, 0, 3)
        if st.is_root:
            assert np.array_equal(got[0], k[:, 3])
            assert np.array_equal(got[1], v[:, 3])


def main():
    tests = [(n, f) for n, f in sorted(globals().items())
             if n.startswith("test_") and callable(f)]
    passed = failed = 0
    for name, fn in tests:
        try:
            fn()
            ok, why = True, ""
        except AssertionError as e:
            ok, why = False, "%s\n%s" % (e, traceback.format_exc())
        except Exception as e:  # noqa: BLE001 - any other error ends the job
            sys.stderr.write("rank %d: %s: %s\n%s" % (
                rank, name, e, traceback.format_exc()))
            sys.stderr.flush()
            comm.Abort(2)
        outcomes = comm.gather((ok, why), root=ROOT)
        if rank == ROOT:
            bad = [(r, w) for r, (o, w) in enumerate(outcomes) if not o]
            if bad:
                failed += 1
                print("FAIL %s" % name)
                for r, w in bad:
                    print("  rank %d: %s" % (r, w))
            else:
                passed += 1
                print("ok   %s" % name)
            sys.stdout.flush()
    if rank == ROOT:
        shutil.rmtree(BASE, ignore_errors=True)
        print("%d passed, %d failed" % (passed, failed))
    failed = comm.bcast(failed, root=ROOT)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
