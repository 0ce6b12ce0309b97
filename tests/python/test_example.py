"""The example's tokens: examples/torch_decode.py's Llama-style model
generates the same tokens with its KV cache in kvflash as with torch's own
cache (the full check, every dtype, runs as the ctest
example_torch_decode); and a bench row's tokens match too."""

import os
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")
sys.path.insert(0, os.path.abspath(EXAMPLES))

import torch_decode as td  # noqa: E402


class Args:
    seed = 3
    dtypes = "bf16"
    new = 10


def test_tokens_identical_to_torch_cache(capsys):
    assert td.check(Args()) == 0
    assert "identical to torch's cache" in capsys.readouterr().out


def test_generation_diverges_without_the_causal_mask(monkeypatch, capsys):
    """The check can fail: prefill that ignores the positions (every query
    sees the whole chunk) gives other tokens."""
    def acausal(self, b, l, q, k, v, pos):
        self.st.append(b, l, k.to(self.kv_dtype), v.to(self.kv_dtype))
        return self.st.attend_multi(b, l, q, None)

    monkeypatch.setattr(td.KvflashCache, "prefill", acausal)
    assert td.check(Args()) == 1
    assert "DIFFERENT" in capsys.readouterr().out


@pytest.mark.parametrize("overlapped", [False, True])
def test_bench_decode_matches(tmp_path, overlapped):
    cfg = td.Config()
    model = td.Model(cfg, seed=5)
    ref = td.TorchCache(cfg, 4, 100, td.torch.float16)
    td.fill_context(ref, cfg, 4, 64, td.torch.float16, 9)
    _, want = td.timed_decode(model, ref, 4, 64, 4)
    kc = td.KvflashCache(cfg, str(tmp_path / "kv"), td.torch.float16, 4,
                         n_threads=2)
    td.fill_context(kc, cfg, 4, 64, td.torch.float16, 9)
    kc.reopen()
    _, got = td.timed_decode(model, kc, 4, 64, 4, overlapped=overlapped)
    kc.close()
    assert got == want


@pytest.mark.parametrize("argv, flag, bad", [
    (["--bench", "--dtype", "f8"], "--dtype", "f8"),
    (["--dtypes", "f16,x"], "--dtypes", "x"),
    (["--compare", "--dtype", "half"], "--dtype", "half")])
def test_an_unknown_dtype_is_refused_by_name(monkeypatch, capsys, argv, flag,
                                             bad):
    monkeypatch.setattr(sys, "argv", ["torch_decode.py"] + argv)
    assert td.main() == 2
    err = capsys.readouterr().err
    assert "%s: %r is not one of f16, bf16, f32" % (flag, bad) in err
