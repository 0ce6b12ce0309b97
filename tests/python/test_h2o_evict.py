"""H2O eviction from Python: Store.h2o_evict drops the least valued token
groups, after which attention equals torch's over the full sequence with
the dropped tokens masked, a read of a dropped token is NotFound, and bad
input is refused."""

import pytest
import torch

import kvflash
from conftest import gqa_reference


def test_evict_then_attend_is_masked(make_store):
    st = make_store(dtype=torch.float32, media="memory")
    g = torch.Generator().manual_seed(3)
    n = 300
    k = torch.randn(n, 2, 64, generator=g)
    v = torch.randn(n, 2, 64, generator=g)
    st.seq_create(1)
    st.append(1, 0, k, v)
    st.sync()
    with pytest.raises(kvflash.InvalidArgument, match="no H2O scores"):
        st.h2o_evict(1, 0)
    for _ in range(3):
        st.attend(1, 0, torch.randn(8, 64, generator=g), h2o=True)
    with pytest.raises(kvflash.InvalidArgument, match="opts.keep"):
        st.h2o_evict(1, 0, keep=0)
    with pytest.raises(kvflash.OutOfRange):
        st.h2o_evict(1, 5)
    dropped = st.h2o_evict(1, 0, keep=0.5)
    # each KV head drops its own groups
    assert dropped > 0 and 2 * n - dropped <= 2 * ((n + 1) // 2)
    keep = torch.ones(2, n, dtype=torch.bool)
    for h in range(2):
        for t in range(n):
            try:
                st.read(1, 0, h, t, t + 1)
            except kvflash.NotFound as e:
                assert "dropped by kvf_h2o_evict" in str(e)
                keep[h, t] = False
    assert int((~keep).sum()) == dropped
    q = torch.randn(8, 64, generator=g)
    got = st.attend(1, 0, q)
    for h in range(2):
        want, _ = gqa_reference(q[None, 4 * h:4 * h + 4], k[:, h:h + 1],
                                v[:, h:h + 1], keep[h][None])
        assert torch.allclose(got[4 * h:4 * h + 4], want[0], atol=1e-4)
