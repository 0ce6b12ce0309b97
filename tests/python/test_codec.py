"""Compressed KV from Python: Store(..., codec=) encodes each head's
sealed token groups (docs/compression.md).  Reads give the decoded values
of sealed groups and the exact ones of the part-filled last group,
attention is close to torch's over the exact values, the codec is kept
by the store (a reopen with another is refused, one with no shape takes
it), and a name that is no codec is refused."""

import os

import pytest
import torch

import kvflash
from conftest import sdpa

# what a codec keeps of random heads: attention-output cosine against the
# exact values (the engine's own tests check the decoded values exactly)
FLOOR = {"fp8": 0.99, "int8": 0.999, "int4": 0.95}


@pytest.mark.parametrize("codec", ["fp8", "int8", "int4"])
def test_codec_reads_and_attends(make_store, codec):
    st = make_store(dtype=torch.float16, name=codec, codec=codec)
    assert st.codec == codec and st.info()["codec"] == \
        kvflash._lib.CODECS[codec]
    # head_dim 64: V fills a page first, K's scales stay f16 (version 1)
    assert st.info()["codec_layout"] == 1
    G = st.group_tokens
    n = 3 * G + 5
    g = torch.Generator().manual_seed(3)
    k = torch.randn(n, 2, 64, generator=g).half()
    v = torch.randn(n, 2, 64, generator=g).half()
    st.seq_create(1)
    st.append(1, 0, k[:7], v[:7])
    st.append(1, 0, k[7:], v[7:])
    for h in range(2):
        rk, rv = st.read(1, 0, h)
        # the tail exact, sealed groups close but encoded
        assert torch.equal(rk[3 * G:], k[3 * G:, h])
        assert torch.equal(rv[3 * G:], v[3 * G:, h])
        assert not torch.equal(rk[:3 * G], k[:3 * G, h])
        err = (rk[:3 * G].float() - k[:3 * G, h].float()).abs().max()
        assert err < 0.6, err
    q = torch.randn(8, 64, generator=g)
    out = st.attend(1, 0, q)
    ref = torch.stack([sdpa(q[i:i + 1].unsqueeze(0),
                            k[:, i // 4].float().unsqueeze(0),
                            v[:, i // 4].float().unsqueeze(0))[0, 0]
                       for i in range(8)])
    cos = torch.nn.functional.cosine_similarity(out, ref, dim=1)
    assert cos.min().item() >= FLOOR[codec], cos


def test_codec_kept_by_the_store(tmp_path):
    p = os.path.join(tmp_path, "s")
    shape = dict(n_layers=1, n_q_heads=2, n_kv_heads=1, head_dim=64,
                 dtype="f16", n_threads=1)
    with kvflash.Store(p, codec="int4", **shape) as st:
        st.seq_create(1)
        kv = torch.ones(100, 1, 64, dtype=torch.float16)
        st.append(1, 0, kv, kv)
    with pytest.raises(kvflash.Mismatch, match="codec int8 contradicts "
                       "the store's int4"):
        kvflash.Store(p, codec="int8", **shape)
    with pytest.raises(kvflash.Mismatch, match="codec none"):
        kvflash.Store(p, **shape)
    with kvflash.Store(p) as st:
        assert st.codec == "int4"
        k, v = st.read(1, 0, 0)
        assert torch.equal(k, torch.ones(100, 64, dtype=torch.float16))
    with kvflash.Store(p, n_threads=1) as st:   # options, no shape
        assert st.codec == "int4"
    with pytest.raises(kvflash.InvalidArgument, match="codec 'int3' is not "
                       "one of none, fp8, int8, int4"):
        kvflash.Store(os.path.join(tmp_path, "t"), codec="int3", **shape)
    with pytest.raises(kvflash.InvalidArgument, match="codec 7 is no "
                       "kvf_codec"):
        kvflash.Store(os.path.join(tmp_path, "t"), codec=7, **shape)
    assert not os.path.exists(os.path.join(tmp_path, "t", "KVFLASH"))
