"""torch.optim optimizers whose state lives in a kvflash store.

    import torch, kvflash, kvflash.torch
    st = kvflash.Store("opt", n_layers=1, n_q_heads=1, n_kv_heads=1,
                       head_dim=64, dtype=torch.float16)
    opt = kvflash.torch.Adam(model.parameters(), st, lr=1e-3)
    loss.backward(); opt.step(); opt.zero_grad()

Each is a real torch.optim.Optimizer (param groups, zero_grad, closures,
state_dict), as Smart-Infinity's offloaded optimizer: the fp32 master
parameters and the moments of every parameter tensor are kept in the
store, and a step streams them through the update next to the data
(kvf_opt_step) with the gradient as the only input; the updated parameters
are written straight into the tensor (no copy for contiguous CPU
parameters, whatever their dtype: float32, float16 or bfloat16).  The
update rules and defaults are torch.optim's.

Each parameter's state is named "<name>/<group>/<index>" in the store.  A
store that already holds state under those names resumes it: the
parameters are set from the stored fp32 masters and the step count goes
on.  Hyper-parameters follow param_groups as torch.optim's do: every step
passes its group's lr, betas, eps, weight_decay, momentum... to the store
(kvf_opt_step_config), so torch.optim.lr_scheduler schedulers (warm-up,
cosine, StepLR, OneCycleLR's momentum) work.  A scheduler's own position
is the caller's to keep across a reopen (its state_dict, or last_epoch),
as with torch.optim.
"""

import torch
from torch.optim.optimizer import Optimizer, required

from . import _lib
from .errors import Closed, InvalidArgument, Mismatch, NotFound, \
    NotSupported, ECLOSED, EINVAL, EMISMATCH, ENOTSUP
from .store import Store

_OUT = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}


class _StoreOptimizer(Optimizer):
    _kind = None     # kvf_opt_kind name
    _hyper = ()      # (group key, kvf_opt_config field, converter)

    def __init__(self, params, store, defaults, name):
        if not isinstance(store, Store):
            raise InvalidArgument(EINVAL, "%s: store must be a kvflash.Store, "
                                  "got %s" % (type(self).__name__,
                                              type(store).__name__))
        if not isinstance(name, str) or not name:
            raise InvalidArgument(EINVAL, "%s: name must be a non-empty "
                                  "string" % type(self).__name__)
        self.store = store
        self.name = name
        self._handles = {}
        super().__init__(params, defaults)

    def add_param_group(self, param_group):
        super().add_param_group(param_group)
        gi = len(self.param_groups) - 1
        group = self.param_groups[gi]
        for pi, p in enumerate(group["params"]):
            self._attach(p, gi, pi, group)

    def _config(self, group):
        cfg = {}
        for key, field, conv in self._hyper:
            val = group[key]
            if conv is not None:
                for f, v in conv(val):
                    cfg[f] = v
            else:
                cfg[field] = val
        return cfg

    def _attach(self, p, gi, pi, group):
        call = "%s(%s)" % (type(self).__name__, self.name)
        if p.dtype not in _OUT:
            raise InvalidArgument(EINVAL, "%s: parameter %d of group %d has "
                                  "dtype %s (float32, float16 or bfloat16)"
                                  % (call, pi, gi, p.dtype))
        if p.is_sparse:
            raise NotSupported(ENOTSUP, "%s: sparse parameters are not "
                               "supported" % call)
        name = "%s/%d/%d" % (self.name, gi, pi)
        cfg = self._config(group)
        n = p.numel()
        if n == 0:  # nothing to keep (torch.optim steps it as a no-op)
            self.state[p]["step"] = 0
            return
        try:
            h = self.store.opt_open(name)
            if h.n_params != n:
                h.close()
                raise Mismatch(EMISMATCH, "%s: the store's state %r holds %d "
                               "parameters, parameter %d of group %d has %d"
                               % (call, name, h.n_params, pi, gi, n))
            h.out_dtype = _lib_dtype(p.dtype)
            h.kind = self._kind
            with torch.no_grad():
                p.copy_(h.read(kind="torch").view_as(p).to(p.dtype))
        except NotFound:
            init = p.detach().reshape(-1).to("cpu", torch.float32)
            h = self.store.opt_create(name, n, self._kind, init=init,
                                      out_dtype=_OUT[p.dtype], **cfg)
        self._handles[p] = (h, cfg)
        self.state[p]["kvflash_name"] = name
        self.state[p]["step"] = h.steps

    @torch.no_grad()
    def step(self, closure=None):
        """One step of every parameter that has a gradient."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            cfg = self._config(group)   # this step's, as the group says now
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.numel() == 0:  # no elements: no state to step
                    self.state[p]["step"] += 1
                    continue
                if p not in self._handles:
                    raise Closed(ECLOSED, "%s.step: the optimizer is closed"
                                 % type(self).__name__)
                h, _ = self._handles[p]
                g = p.grad
                if g.is_sparse:
                    raise NotSupported(ENOTSUP, "%s.step: sparse gradients "
                                       "are not supported" %
                                       type(self).__name__)
                g = g.detach().reshape(-1)
                direct = p.device.type == "cpu" and p.is_contiguous()
                out = p if direct else torch.empty(
                    p.shape, dtype=p.dtype)
                h.step(g, params_out=out.view(-1), **cfg)
                if not direct:
                    p.copy_(out)
                self.state[p]["step"] += 1
        return loss

    def close(self):
        """Release the store handles (the state stays in the store)."""
        for h, _ in self._handles.values():
            h.close()
        self._handles = {}


def _lib_dtype(dt):
    return {torch.float32: _lib.DTYPE_F32, torch.float16: _lib.DTYPE_F16,
            torch.bfloat16: _lib.DTYPE_BF16}[dt]


def _betas(b):
    return [("beta1", float(b[0])), ("beta2", float(b[1]))]


def _bool(b):
    return [("nesterov", 1 if b else 0)]


class Adam(_StoreOptimizer):
    """torch.optim.Adam with its state in a kvflash store."""
    _kind = "adam"
    _hyper = (("lr", "lr", None), ("betas", None, _betas),
              ("eps", "eps", None), ("weight_decay", "weight_decay", None))

    def __init__(self, params, store, lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                 weight_decay=0, *, name="adam"):
        super().__init__(params, store, dict(lr=lr, betas=betas, eps=eps,
                                             weight_decay=weight_decay), name)


class AdamW(_StoreOptimizer):
    """torch.optim.AdamW (decoupled weight decay) with its state in a
    kvflash store."""
    _kind = "adamw"
    _hyper = Adam._hyper

    def __init__(self, params, store, lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                 weight_decay=1e-2, *, name="adamw"):
        super().__init__(params, store, dict(lr=lr, betas=betas, eps=eps,
                                             weight_decay=weight_decay), name)


class SGD(_StoreOptimizer):
    """torch.optim.SGD (momentum, dampening, Nesterov, weight decay) with
    its state in a kvflash store."""
    _kind = "sgd"
    _hyper = (("lr", "lr", None), ("momentum", "momentum", None),
              ("dampening", "dampening", None),
              ("weight_decay", "weight_decay", None),
              ("nesterov", None, _bool))

    def __init__(self, params, store, lr=required, momentum=0, dampening=0,
                 weight_decay=0, nesterov=False, *, name="sgd"):
        if lr is required:
            raise InvalidArgument(EINVAL, "SGD: lr is required (as for "
                                  "torch.optim.SGD)")
        super().__init__(params, store, dict(
            lr=lr, momentum=momentum, dampening=dampening,
            weight_decay=weight_decay, nesterov=nesterov), name)


class Adagrad(_StoreOptimizer):
    """torch.optim.Adagrad with its state in a kvflash store."""
    _kind = "adagrad"
    _hyper = (("lr", "lr", None), ("lr_decay", "lr_decay", None),
              ("weight_decay", "weight_decay", None),
              ("initial_accumulator_value", "initial_accumulator_value",
               None), ("eps", "eps", None))

    def __init__(self, params, store, lr=1e-2, lr_decay=0, weight_decay=0,
                 initial_accumulator_value=0, eps=1e-10, *, name="adagrad"):
        super().__init__(params, store, dict(
            lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
            initial_accumulator_value=initial_accumulator_value, eps=eps),
            name)


__all__ = ["Adam", "AdamW", "SGD", "Adagrad"]
