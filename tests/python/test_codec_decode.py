"""Each codec end to end, held to its documented figures: greedy decoding
of examples/torch_decode.py's model with the KV in an uncompressed store
and, in lockstep, in a store of each codec fed the same tokens (the
example's --compare; docs/compression.md, "Accuracy", has the 512-step
figures and these bounds beside them).  A second uncompressed store must
agree exactly, and the bounds must tell the codecs apart: a codec that
fell to the next one's accuracy would fail its own."""

import json
import os
import sys

import pytest
import torch

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")
sys.path.insert(0, os.path.abspath(EXAMPLES))

import torch_decode as td  # noqa: E402

# the run: model seed 0, four prompts (seed 1) of which three hold sealed
# groups of every codec from the start, 64 steps each, f16 K/V
PROMPTS = (5, 140, 230, 300)
STEPS = 64
# per codec: the least agreement and the largest mean KL (nats) accepted.
# Measured: fp8 99.2 % and 2.95e-5, int8 100 % and 1.16e-6, int4 97.7 %
# and 1.33e-4.  KL: the measured figure plus half of it; agreement: a few
# steps more than measured may flip (the model's next-token distribution
# is nearly flat, so its misses are near-ties; see the docs).
BOUNDS = {"fp8": (0.98, 4.5e-5), "int8": (0.99, 1.8e-6),
          "int4": (0.95, 2.0e-4)}


@pytest.fixture(scope="module")
def figures(tmp_path_factory):
    model = td.Model(td.Config(), seed=0)
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(model.cfg.vocab, (n,), generator=g).tolist()
               for n in PROMPTS]
    return td.compare_codecs(model, prompts, STEPS,
                             ["none"] + list(td.CODECS), torch.float16,
                             str(tmp_path_factory.mktemp("codecs")),
                             n_threads=2)["codecs"]


@pytest.mark.parametrize("codec", td.CODECS)
def test_codec_within_its_documented_figures(figures, codec):
    f = figures[codec]
    least, most = BOUNDS[codec]
    # the run measured what it is meant to: most attended tokens encoded
    assert f["encoded_share"] > 0.5, f
    assert f["agreement"] >= least, f
    assert f["kl_mean"] <= most, f
    # a miss is a near-tie in the reference's distribution
    assert f["miss_gap_max"] < 0.1, f


def test_uncompressed_store_agrees_exactly(figures):
    f = figures["none"]
    assert f["agreement"] == 1.0 and f["kl_mean"] == 0.0 and \
        f["kl_max"] == 0.0, f


def test_bounds_tell_the_codecs_apart(figures):
    """Each codec's KL bound lies below what the next coarser codec
    measures: int8 degraded to fp8's accuracy, or fp8 to int4's, fails."""
    assert figures["fp8"]["kl_mean"] > BOUNDS["int8"][1]
    assert figures["int4"]["kl_mean"] > BOUNDS["fp8"][1]


@pytest.mark.parametrize("field,value,says", [
    ("codecs", "int8,int3", "--codecs: 'int3' is not one of none, fp8, "
     "int8, int4"),
    ("dtype", "f8", "--dtype: 'f8' is not one of f16, bf16, f32"),
    ("steps", 0, "--steps: 0 is not a count of steps")])
def test_compare_refuses_bad_arguments(capsys, field, value, says):
    class Args:
        codecs = "int8"
        dtype = "f16"
        steps = 4
        seed = 0
        dir = None
        json = False

    setattr(Args, field, value)
    assert td.compare(Args()) == 2
    assert says in capsys.readouterr().err


@pytest.mark.parametrize("as_json", [False, True])
def test_compare_prints_the_figures(capsys, as_json):
    """The example's --compare output, a few steps: the table or the
    JSON, one row per codec asked for."""
    class Args:
        codecs = "none,int8"
        dtype = "bf16"
        steps = 3
        seed = 0
        dir = None
        json = as_json

    assert td.compare(Args()) == 0
    out = capsys.readouterr().out
    if as_json:
        r = json.loads(out)
        assert r["steps"] == 3 and r["sequences"] == 4 and \
            r["dtype"] == "bf16" and list(r["codecs"]) == ["none", "int8"]
        assert r["codecs"]["none"]["agreement"] == 1.0
        assert set(r["codecs"]["int8"]) == {
            "group_tokens", "agreement", "kl_mean", "kl_max",
            "miss_gap_max", "encoded_share"}
    else:
        rows = [line.split()[0] for line in out.splitlines()[2:]]
        assert rows == ["none", "int8"], out
        assert "4 sequences x 3 steps, bf16 K/V" in out
