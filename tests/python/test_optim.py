"""kvflash.torch optimizers against torch.optim over many steps, state
kept in the store and resumed after a reopen; and the low-level handle."""

import copy
import os

import pytest
import torch

import kvflash
import kvflash.torch as kt


def make_model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(),
                               torch.nn.Linear(32, 4))


def train(model, opt, steps, seed=1):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(8, 16, generator=g)
        y = torch.randn(8, 4, generator=g)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    return loss.item()


CASES = [
    (kt.Adam, torch.optim.Adam, dict(lr=1e-2)),
    (kt.Adam, torch.optim.Adam, dict(lr=3e-3, betas=(0.8, 0.99),
                                     weight_decay=0.1)),
    (kt.AdamW, torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.05)),
    (kt.SGD, torch.optim.SGD, dict(lr=0.05, momentum=0.9, nesterov=True)),
    (kt.SGD, torch.optim.SGD, dict(lr=0.05, momentum=0.5, dampening=0.1,
                                   weight_decay=0.01)),
    (kt.Adagrad, torch.optim.Adagrad, dict(lr=0.05, lr_decay=0.01)),
]


@pytest.mark.parametrize("ours,theirs,hyper", CASES)
def test_matches_torch_optim_over_many_steps(make_store, ours, theirs,
                                             hyper):
    st = make_store(media="memory", n_layers=1, n_q_heads=1, n_kv_heads=1)
    a = make_model()
    b = copy.deepcopy(a)
    opt_a = ours(a.parameters(), st, **hyper)
    assert isinstance(opt_a, torch.optim.Optimizer)
    opt_b = theirs(b.parameters(), **hyper)
    train(a, opt_a, 200)
    train(b, opt_b, 200)
    for pa, pb in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(pa, pb, atol=2e-5, rtol=1e-4)
    first = next(iter(a.parameters()))
    assert opt_a.state[first]["step"] == 200
    assert st.stats()["opt_bytes"] > 0


def test_state_survives_reopen(tmp_path):
    path = os.path.join(tmp_path, "opt")
    shape = dict(n_layers=1, n_q_heads=1, n_kv_heads=1, head_dim=64,
                 dtype=torch.float16, n_threads=2)
    a = make_model()
    b = copy.deepcopy(a)
    opt_b = torch.optim.Adam(b.parameters(), lr=1e-2)
    with kvflash.Store(path, **shape) as st:
        opt_a = kt.Adam(a.parameters(), st, lr=1e-2, name="w")
        train(a, opt_a, 30, seed=3)
        opt_a.close()
    train(b, opt_b, 30, seed=3)
    c = make_model(seed=42)           # other weights: the store's win
    with kvflash.Store(path) as st:
        opt_c = kt.Adam(c.parameters(), st, lr=1e-2, name="w")
        for pa, pc in zip(a.parameters(), c.parameters()):
            assert torch.equal(pa, pc)
        assert opt_c.state[next(iter(c.parameters()))]["step"] == 30
        train(c, opt_c, 30, seed=4)
        opt_c.close()
    train(b, opt_b, 30, seed=4)
    for pb, pc in zip(b.parameters(), c.parameters()):
        torch.testing.assert_close(pc, pb, atol=2e-5, rtol=1e-4)


def test_refusals(make_store):
    st = make_store(media="memory", n_layers=1, n_q_heads=1, n_kv_heads=1)
    m = make_model()
    with pytest.raises(kvflash.InvalidArgument) as e:
        kt.SGD(m.parameters(), st)
    assert "lr is required" in e.value.message
    with pytest.raises(kvflash.InvalidArgument):
        kt.Adam(m.parameters(), "not a store")
    opt = kt.Adam(m.parameters(), st, lr=1e-2)
    train(m, opt, 2)
    # a group's hyper-parameter that torch refuses is refused at the step,
    # and nothing moves
    before = [p.detach().clone() for p in m.parameters()]
    opt.param_groups[0]["betas"] = (0.9, 1.5)
    with pytest.raises(kvflash.InvalidArgument) as e:
        train(m, opt, 1)
    assert "beta2" in e.value.message
    for p, q in zip(m.parameters(), before):
        assert torch.equal(p, q)
    opt.param_groups[0]["betas"] = (0.9, 0.999)
    with pytest.raises(kvflash.InvalidArgument) as e:
        kt.Adam(m.parameters(), st, lr=-1.0, name="neg")
    assert "lr" in e.value.message
    # the same name with another shape is a mismatch
    with pytest.raises(kvflash.Mismatch) as e:
        kt.Adam([torch.nn.Parameter(torch.zeros(3))], st, lr=1e-2)
    assert "holds 512 parameters" in e.value.message


def test_half_params_and_low_level_handle(make_store):
    st = make_store(media="memory", n_layers=1, n_q_heads=1, n_kv_heads=1)
    p = torch.nn.Parameter(torch.randn(1000).half())
    opt = kt.SGD([p], st, lr=0.1)
    p.grad = torch.ones(1000, dtype=torch.float16)
    before = p.detach().float().clone()
    opt.step()
    torch.testing.assert_close(p.detach().float(),
                               (before - 0.1).half().float(), atol=1e-3,
                               rtol=1e-3)
    h = st.opt_create("raw", 5, "sgd", lr=1.0, init=torch.arange(5.0))
    h.step(torch.tensor([1.0, 0, 0, 0, 2.0]))
    assert torch.equal(h.read(), torch.tensor([-1.0, 1, 2, 3, 2]))
    h.step(torch.tensor([1.0]), indices=[2])
    assert torch.equal(h.read(), torch.tensor([-1.0, 1, 1, 3, 2]))
    assert h.steps == 2
    with pytest.raises(kvflash.InvalidArgument):
        h.step(torch.ones(4))
    with pytest.raises(kvflash.OutOfRange):
        h.step(torch.tensor([float("nan")] * 5))
    h.close()
    st.opt_free("raw")
    with pytest.raises(kvflash.NotFound):
        st.opt_open("raw")


def cosine_warmup(warmup, total):
    """LambdaLR's factor: linear warm-up, then a cosine to 10%."""
    import math

    def f(step):
        if step < warmup:
            return (step + 1) / warmup
        t = (step - warmup) / max(1, total - warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t))
    return f


SCHEDULES = [
    (kt.AdamW, torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.05),
     lambda o: torch.optim.lr_scheduler.LambdaLR(o, cosine_warmup(20, 200))),
    (kt.Adam, torch.optim.Adam, dict(lr=1e-2),
     lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=30, gamma=0.5)),
    (kt.SGD, torch.optim.SGD, dict(lr=0.05, momentum=0.9),
     lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=25, gamma=0.3)),
    (kt.Adagrad, torch.optim.Adagrad, dict(lr=0.05),
     lambda o: torch.optim.lr_scheduler.LambdaLR(o, cosine_warmup(10, 200))),
]


@pytest.mark.parametrize("ours,theirs,hyper,sched", SCHEDULES)
def test_lr_schedulers_across_a_reopen(tmp_path, ours, theirs, hyper, sched):
    """200 steps under a scheduler, the store closed and reopened halfway
    (the scheduler's position comes back through its state_dict, as with
    torch.optim), equal torch.optim's within the usual tolerance."""
    path = os.path.join(tmp_path, "sched")
    shape = dict(n_layers=1, n_q_heads=1, n_kv_heads=1, head_dim=64,
                 dtype=torch.float32, n_threads=2)
    a = make_model()
    b = copy.deepcopy(a)
    opt_b = theirs(b.parameters(), **hyper)
    sched_b = sched(opt_b)
    lrs = []
    with kvflash.Store(path, **shape) as st:
        opt_a = ours(a.parameters(), st, **hyper, name="s")
        sched_a = sched(opt_a)
        for i in range(100):
            train(a, opt_a, 1, seed=10 + i)
            sched_a.step()
        saved = sched_a.state_dict()
        opt_a.close()
    with kvflash.Store(path) as st:
        opt_c = ours(a.parameters(), st, **hyper, name="s")
        sched_c = sched(opt_c)
        sched_c.load_state_dict(saved)
        # the groups' lr is the optimizer's state (torch keeps it in the
        # optimizer's state_dict): put it back where the schedule was
        for group, lr in zip(opt_c.param_groups, sched_c.get_last_lr()):
            group["lr"] = lr
        for i in range(100, 200):
            lrs.append(opt_c.param_groups[0]["lr"])
            train(a, opt_c, 1, seed=10 + i)
            sched_c.step()
        opt_c.close()
    for i in range(200):
        train(b, opt_b, 1, seed=10 + i)
        sched_b.step()
    assert len(set(lrs)) > 3            # the schedule did change the lr
    for pa, pb in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(pa, pb, atol=2e-5, rtol=1e-4)


def test_a_parameter_with_no_elements_is_stepped_as_torch_does(make_store):
    # torch.optim takes a zero-element parameter; kvflash.torch refused it
    # ("n_params 0 out of range")
    st = make_store(media="memory", n_layers=1, n_q_heads=1, n_kv_heads=1)
    a = make_model()
    a.register_parameter("empty", torch.nn.Parameter(torch.zeros(0, 3)))
    b = copy.deepcopy(a)
    opt_a = kt.Adam(a.parameters(), st, lr=1e-2)
    opt_b = torch.optim.Adam(b.parameters(), lr=1e-2)
    for m, o in ((a, opt_a), (b, opt_b)):
        o.zero_grad()
        loss = m(torch.ones(2, 16)).sum() + m.empty.sum()
        loss.backward()
        o.step()
    for pa, pb in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(pa, pb, atol=2e-5, rtol=1e-4)
    assert opt_a.state[a.empty]["step"] == 1
