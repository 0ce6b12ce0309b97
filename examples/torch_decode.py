#!/usr/bin/env python3
"""torch_decode.py - a small Llama-style decoder (GQA, RoPE, RMSNorm,
SwiGLU; random weights) generating greedily with its KV cache in kvflash,
checked token for token against the same model with torch's own cache.

    python3 examples/torch_decode.py                 # the check (tests run it)
    python3 examples/torch_decode.py --bench         # tokens/s side by side
    python3 examples/torch_decode.py --compare       # each codec's accuracy

The check: a batch of prompts of different lengths is prefilled in chunks
(K/V appended, then the chunk's queries attended at their positions with
kvf_attend_multi, causal), then decoded one token per step for the whole
batch (kvf_attend_batch), half of the steps after closing and reopening
the store; the same model with an in-memory torch cache must produce the
same tokens.  For f16, bf16 and f32 K/V (the torch cache holds the same
rounded values, in float32).

The benchmark: a synthetic context per sequence (random K/V written to
both caches, no prefill compute), then decode steps, timed, for torch's
in-memory cache and for kvflash (memory store; file store with O_DIRECT
reads, attention started in the background per half-batch so that the
store's reads and attention overlap the model's own compute).  With
--limit-gib the run happens in a child process whose data memory is capped
(RLIMIT_DATA): a working set larger than that does not fit in memory, so
torch's cache cannot hold it while kvflash streams it from the file store.

The comparison (at the end of this file): greedy decoding with the KV in
an uncompressed store and, fed the same tokens in lockstep, in a store of
each codec (fp8, int8, int4); per codec the share of steps whose argmax
token agrees and the mean KL divergence of the next-token distribution
(docs/compression.md, "Accuracy").
"""

import argparse
import json
import math
import os
import resource
import shutil
import sys
import tempfile
import time

import torch

try:
    import kvflash
except ImportError:  # run from the source tree: look in the build tree
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "build", "python"))
    import kvflash

DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}


class Config:
    def __init__(self, vocab=512, dim=256, n_layers=4, n_heads=8,
                 n_kv_heads=2, head_dim=32, ffn=512, theta=10000.0):
        self.vocab, self.dim, self.n_layers = vocab, dim, n_layers
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, \
            head_dim
        self.ffn, self.theta = ffn, theta


class Model:
    """Llama-style weights (random, seeded) and the per-layer pieces."""

    def __init__(self, cfg, seed=0):
        g = torch.Generator().manual_seed(seed)
        c = cfg
        hq, hk, d = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim, c.dim

        def w(*shape, scale=None):
            s = scale if scale is not None else 1.0 / math.sqrt(shape[-1])
            return torch.randn(*shape, generator=g) * s

        self.cfg = c
        self.emb = w(c.vocab, d, scale=1.0)
        self.layers = [dict(n1=1 + 0.1 * w(d, scale=1.0), wq=w(hq, d),
                            wk=w(hk, d), wv=w(hk, d), wo=w(d, hq),
                            n2=1 + 0.1 * w(d, scale=1.0), w1=w(c.ffn, d),
                            w3=w(c.ffn, d), w2=w(d, c.ffn))
                       for _ in range(c.n_layers)]
        self.norm = torch.ones(d)
        self.out = w(c.vocab, d)
        inv = 1.0 / (c.theta ** (torch.arange(0, c.head_dim, 2).float()
                                 / c.head_dim))
        self.inv_freq = inv

    @staticmethod
    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w

    def rope(self, x, pos):
        """x [T, H, D], pos [T]: rotate-half RoPE."""
        f = pos.float()[:, None] * self.inv_freq[None, :]
        cos = torch.cat([f.cos(), f.cos()], -1)[:, None, :]
        sin = torch.cat([f.sin(), f.sin()], -1)[:, None, :]
        h = x.shape[-1] // 2
        rot = torch.cat([-x[..., h:], x[..., :h]], -1)
        return x * cos + rot * sin

    def qkv(self, l, h, pos):
        c, L = self.cfg, self.layers[l]
        x = self.rms(h, L["n1"])
        T = x.shape[0]
        q = (x @ L["wq"].T).view(T, c.n_heads, c.head_dim)
        k = (x @ L["wk"].T).view(T, c.n_kv_heads, c.head_dim)
        v = (x @ L["wv"].T).view(T, c.n_kv_heads, c.head_dim)
        return self.rope(q, pos), self.rope(k, pos), v

    def post(self, l, h, attn):
        L = self.layers[l]
        h = h + attn.reshape(h.shape[0], -1) @ L["wo"].T
        x = self.rms(h, L["n2"])
        return h + (torch.nn.functional.silu(x @ L["w1"].T) *
                    (x @ L["w3"].T)) @ L["w2"].T

    def logits(self, h):
        return self.rms(h, self.norm) @ self.out.T


# ---- the two KV caches ----------------------------------------------------


class TorchCache:
    """torch's own in-memory cache: per layer a [B, Hkv, max_len, D]
    float32 tensor (holding values rounded to the K/V dtype), attention by
    grouped matmuls."""

    def __init__(self, cfg, batch, max_len, kv_dtype):
        c = cfg
        self.kv_dtype = kv_dtype
        self.k = [torch.zeros(batch, c.n_kv_heads, max_len, c.head_dim)
                  for _ in range(c.n_layers)]
        self.v = [torch.zeros_like(t) for t in self.k]
        self.len = [0] * batch
        self.cfg = cfg

    def _round(self, x):
        return x.to(self.kv_dtype).float()

    def prefill(self, b, l, q, k, v, pos):
        t0, t1 = int(pos[0]), int(pos[-1]) + 1
        self.k[l][b, :, t0:t1] = self._round(k).transpose(0, 1)
        self.v[l][b, :, t0:t1] = self._round(v).transpose(0, 1)
        if l == self.cfg.n_layers - 1:
            self.len[b] = t1
        c = self.cfg
        d = c.n_heads // c.n_kv_heads
        K, V = self.k[l][b, :, :t1], self.v[l][b, :, :t1]
        qq = q.transpose(0, 1).reshape(c.n_kv_heads, d * q.shape[0],
                                       c.head_dim)
        s = qq @ K.transpose(1, 2) / math.sqrt(c.head_dim)
        s = s.view(c.n_kv_heads, d, q.shape[0], t1)
        mask = torch.arange(t1)[None, :] > pos[:, None]
        s = s.masked_fill(mask, float("-inf")).softmax(-1)
        o = (s.view(c.n_kv_heads, d * q.shape[0], t1) @ V)
        return o.view(c.n_kv_heads, d, q.shape[0], c.head_dim) \
            .permute(2, 0, 1, 3).reshape(q.shape[0], c.n_heads, c.head_dim)

    def decode(self, l, q, k, v, seqs):
        c = self.cfg
        d = c.n_heads // c.n_kv_heads
        for i, b in enumerate(seqs):
            t = self.len[b]
            self.k[l][b, :, t] = self._round(k[i])
            self.v[l][b, :, t] = self._round(v[i])
        lens = {self.len[b] for b in seqs}
        if len(lens) == 1 and list(seqs) == list(range(seqs[0],
                                                        seqs[0] + len(seqs))):
            # one batched matmul when the sequences are as long
            t = lens.pop() + 1
            b0, b1 = seqs[0], seqs[0] + len(seqs)
            K, V = self.k[l][b0:b1, :, :t], self.v[l][b0:b1, :, :t]
            qq = q.view(len(seqs), c.n_kv_heads, d, c.head_dim)
            s = torch.einsum("bhdk,bhtk->bhdt", qq, K) \
                .div(math.sqrt(c.head_dim)).softmax(-1)
            out = torch.einsum("bhdt,bhtk->bhdk", s, V) \
                .reshape(len(seqs), c.n_heads, c.head_dim)
        else:
            outs = []
            for i, b in enumerate(seqs):
                t = self.len[b]
                K, V = self.k[l][b, :, :t + 1], self.v[l][b, :, :t + 1]
                qq = q[i].view(c.n_kv_heads, d, c.head_dim)
                s = (qq @ K.transpose(1, 2) /
                     math.sqrt(c.head_dim)).softmax(-1)
                outs.append((s @ V).reshape(c.n_heads, c.head_dim))
            out = torch.stack(outs)
        if l == c.n_layers - 1:
            for b in seqs:
                self.len[b] += 1
        return out

    def close(self):
        pass


class KvflashCache:
    """K/V in a kvflash store: appended per layer, attention computed by the
    store (kvf_attend_multi for prefill chunks, kvf_attend_batch for
    decode; kvf_attend_start for the overlapped decode)."""

    def __init__(self, cfg, path, kv_dtype, batch, **opts):
        self.cfg, self.path, self.opts = cfg, path, opts
        self.kv_dtype = kv_dtype
        self.st = kvflash.Store(path, n_layers=cfg.n_layers,
                                n_q_heads=cfg.n_heads,
                                n_kv_heads=cfg.n_kv_heads,
                                head_dim=cfg.head_dim, dtype=kv_dtype, **opts)
        self.seqs = list(range(batch))
        for b in self.seqs:
            self.st.seq_create(b)

    def reopen(self):
        self.st.close()
        self.st = kvflash.Store(self.path)

    def prefill(self, b, l, q, k, v, pos):
        self.st.append(b, l, k.to(self.kv_dtype), v.to(self.kv_dtype))
        return self.st.attend_multi(b, l, q, pos)

    def decode(self, l, q, k, v, seqs):
        k, v = k.to(self.kv_dtype), v.to(self.kv_dtype)
        for i, b in enumerate(seqs):
            self.st.append(b, l, k[i:i + 1], v[i:i + 1])
        return self.st.attend_batch(seqs, l, q)

    def decode_start(self, l, q, k, v, seqs):
        k, v = k.to(self.kv_dtype), v.to(self.kv_dtype)
        for i, b in enumerate(seqs):
            self.st.append(b, l, k[i:i + 1], v[i:i + 1])
        return self.st.attend_start(seqs, l, q)

    def close(self):
        self.st.close()


# ---- generation ---------------------------------------------------------


def prefill(model, cache, b, tokens, chunk):
    """Prefill one sequence's prompt in chunks; the last position's h."""
    h_last = None
    for t0 in range(0, len(tokens), chunk):
        ids = torch.tensor(tokens[t0:t0 + chunk])
        pos = torch.arange(t0, t0 + len(ids))
        h = model.emb[ids]
        for l in range(model.cfg.n_layers):
            q, k, v = model.qkv(l, h, pos)
            h = model.post(l, h, cache.prefill(b, l, q, k, v, pos))
        h_last = h[-1:]
    return h_last


def step_logits(model, cache, tokens, positions, seqs):
    """One decode step of a batch: each sequence's next-token logits."""
    h = model.emb[torch.tensor(tokens)]
    pos = torch.tensor(positions)
    for l in range(model.cfg.n_layers):
        q, k, v = model.qkv(l, h, pos)
        h = model.post(l, h, cache.decode(l, q, k, v, seqs))
    return model.logits(h)


def step(model, cache, tokens, positions, seqs):
    """One decode step of a batch: the next token of each sequence."""
    return step_logits(model, cache, tokens, positions, seqs) \
        .argmax(-1).tolist()


def step_overlapped(model, cache, tokens, positions, seqs):
    """One decode step in two half-batches: the store attends one half in
    the background while the model computes the other half's projections
    or the first half's output projection and MLP."""
    half = max(1, len(seqs) // 2)
    parts = [slice(0, half), slice(half, len(seqs))]
    h = [model.emb[torch.tensor(tokens[p])] for p in parts]
    pos = [torch.tensor(positions[p]) for p in parts]
    ids = [seqs[p] for p in parts]
    for l in range(model.cfg.n_layers):
        jobs = []
        for i in range(2):
            if not ids[i]:
                jobs.append(None)
                continue
            q, k, v = model.qkv(l, h[i], pos[i])
            jobs.append(cache.decode_start(l, q, k, v, ids[i]))
        for i in range(2):
            if jobs[i] is not None:
                h[i] = model.post(l, h[i], jobs[i].wait())
    return torch.cat([model.logits(x) for x in h if x.shape[0]]) \
        .argmax(-1).tolist()


def generate(model, cache, prompts, n_new, chunk, reopen_at=None):
    seqs = list(range(len(prompts)))
    nxt = []
    for b, p in enumerate(prompts):
        nxt.append(int(model.logits(prefill(model, cache, b, p, chunk))
                       .argmax(-1)))
    out = [[t] for t in nxt]
    lens = [len(p) for p in prompts]
    for s in range(n_new - 1):
        if reopen_at is not None and s == reopen_at and \
                hasattr(cache, "reopen"):
            cache.reopen()
        nxt = step(model, cache, nxt, lens, seqs)
        lens = [n + 1 for n in lens]
        for b, t in enumerate(nxt):
            out[b].append(t)
    return out


def model_and_prompts(seed):
    """The check's and the comparison's model and its four prompts (5 to
    129 tokens), both from seed."""
    cfg = Config()
    model = Model(cfg, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    prompts = [torch.randint(cfg.vocab, (n,), generator=g).tolist()
               for n in (5, 70, 33, 129)]
    return cfg, model, prompts


def check(args):
    cfg, model, prompts = model_and_prompts(args.seed)
    ok = True
    for name in args.dtypes.split(","):
        kv = DTYPES[name]
        tmp = tempfile.mkdtemp(prefix="kvflash-decode-")
        try:
            ref = TorchCache(cfg, len(prompts), 256, kv)
            want = generate(model, ref, prompts, args.new, chunk=32)
            kc = KvflashCache(cfg, os.path.join(tmp, "kv"), kv, len(prompts),
                              n_threads=2)
            got = generate(model, kc, prompts, args.new, chunk=32,
                           reopen_at=args.new // 2)
            kc.close()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        same = got == want
        ok &= same
        n = sum(len(t) for t in got)
        print("%-4s %d sequences, %d tokens generated (prompts %s, reopened "
              "after %d steps): %s" % (
                  name, len(prompts), n, [len(p) for p in prompts],
                  args.new // 2,
                  "identical to torch's cache" if same else "DIFFERENT"))
        if not same:
            for b in range(len(prompts)):
                if got[b] != want[b]:
                    i = next(i for i in range(len(got[b]))
                             if got[b][i] != want[b][i])
                    print("  sequence %d first differs at token %d: kvflash "
                          "%d, torch %d" % (b, i, got[b][i], want[b][i]))
    return 0 if ok else 1


# ---- benchmark ------------------------------------------------------------


def fill_context(cache, cfg, batch, ctx, kv_dtype, seed):
    """The same random K/V context in a cache, layer by layer."""
    g = torch.Generator().manual_seed(seed)
    block = 4096
    for b in range(batch):
        for t0 in range(0, ctx, block):
            n = min(block, ctx - t0)
            for l in range(cfg.n_layers):
                k = torch.randn(n, cfg.n_kv_heads, cfg.head_dim,
                                generator=g).to(kv_dtype)
                v = torch.randn(n, cfg.n_kv_heads, cfg.head_dim,
                                generator=g).to(kv_dtype)
                if isinstance(cache, TorchCache):
                    cache.k[l][b, :, t0:t0 + n] = k.float().transpose(0, 1)
                    cache.v[l][b, :, t0:t0 + n] = v.float().transpose(0, 1)
                else:
                    cache.st.append(b, l, k, v)
    if isinstance(cache, TorchCache):
        cache.len = [ctx] * batch
    else:
        cache.st.sync()


def timed_decode(model, cache, batch, ctx, steps, overlapped=False):
    seqs = list(range(batch))
    toks = [1] * batch
    fn = step_overlapped if overlapped else step
    toks = fn(model, cache, toks, [ctx] * batch, seqs)  # warm-up step
    out = [toks]
    t = time.perf_counter()
    for s in range(steps):
        toks = fn(model, cache, toks, [ctx + 1 + s] * batch, seqs)
        out.append(toks)
    return batch * steps / (time.perf_counter() - t), out


def bench_one(args, which):
    """tokens/s of one configuration, or a string saying why there is
    none."""
    cfg = Config(vocab=1024, dim=1024, n_layers=args.layers, n_heads=16,
                 n_kv_heads=4, head_dim=128, ffn=2048)
    model = Model(cfg, seed=1)
    kv = DTYPES[args.dtype]
    B, ctx = args.batch, args.context
    max_len = ctx + args.steps + 2
    tmp = tempfile.mkdtemp(prefix="kvflash-bench-", dir=args.dir)
    try:
        if which == "torch":
            try:
                cache = TorchCache(cfg, B, max_len, kv)
                fill_context(cache, cfg, B, ctx, kv, 7)
            except (RuntimeError, MemoryError) as e:
                return "does not fit (%s)" % str(e).split("\n")[0][:60]
            return timed_decode(model, cache, B, ctx, args.steps)
        opts = dict(n_threads=0, capacity_bytes=args.capacity_gib << 30)
        memory = which.startswith("kvflash-memory")
        if memory:
            opts["media"] = "memory"
        cache = KvflashCache(cfg, os.path.join(tmp, "kv"), kv, B, **opts)
        try:
            fill_context(cache, cfg, B, ctx, kv, 7)
            if not memory:
                cache.reopen()  # cold: nothing of the context in memory
            return timed_decode(model, cache, B, ctx, args.steps,
                                overlapped=which.endswith("-overlap"))
        finally:
            try:
                cache.close()
            except kvflash.Error:
                pass  # the row's own error is the one to report
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def bench(args):
    kv_bytes = 2 * args.layers * 4 * 128 * 2 * args.batch * \
        (args.context + args.steps)
    if args.limit_gib:
        lim = int(args.limit_gib * (1 << 30))
        resource.setrlimit(resource.RLIMIT_DATA, (lim, lim))
    print("working set: %.2f GiB of K/V (%d sequences x %d tokens, %d "
          "layers, 4 KV heads of 128, %s)%s" % (
              kv_bytes / 2 ** 30, args.batch, args.context, args.layers,
              args.dtype, ", data memory capped at %.2f GiB" %
              args.limit_gib if args.limit_gib else ""))
    rows = args.only.split(",") if args.only else list(BENCH_ROWS)
    ref = None
    for which in rows:
        try:
            r = bench_one(args, which)
        except kvflash.Error as e:
            r = "kvflash error: %s" % e.message[:80]
        except (MemoryError, RuntimeError) as e:
            r = "does not fit (%s)" % str(e).split("\n")[0][-60:]
        if isinstance(r, tuple):
            rate, toks = r
            if which == "torch":
                ref = toks
            same = "" if ref is None or which == "torch" else (
                ", tokens as torch's" if toks == ref else
                ", TOKENS DIFFER from torch's")
            print("  %-22s %8.1f tokens/s%s" % (which, rate, same),
                  flush=True)
        else:
            print("  %-22s %s" % (which, r), flush=True)
    return 0


# ---- codec accuracy -------------------------------------------------------

CODECS = ("fp8", "int8", "int4")


def unknown_dtype(flag, names):
    """True (and a message naming flag and the name) when a name is no
    K/V dtype."""
    for name in names:
        if name not in DTYPES:
            print("torch_decode.py: %s: %r is not one of %s" % (
                flag, name, ", ".join(DTYPES)), file=sys.stderr)
            return True
    return False


def compare_codecs(model, prompts, steps, codecs, kv_dtype, tmp, **opts):
    """Greedy decoding with the KV in an uncompressed store and, in
    lockstep, in one store per codec, teacher-forced: every store is fed
    the uncompressed run's tokens, so that each step compares next-token
    distributions over the same context (a free-running codec run would,
    after its first different token, compare other contexts).  A step is
    one generated token of one sequence, the first from the prefill's last
    position.  Per codec: agreement, the share of steps whose argmax is
    the uncompressed run's token; the mean and largest KL(p_ref || p_codec)
    in nats; the widest gap, in the reference's log-probabilities, between
    its token and the codec's at a step where they differ (how near a tie
    the misses were); and the share of the attended tokens that lay in
    encoded (sealed) groups, the rest being the exact part-filled last
    group.
    codecs may name "none" too: a second uncompressed store, which must
    agree exactly."""
    cfg = model.cfg
    seqs = list(range(len(prompts)))
    ref = None
    caches = {}
    ref_stats = dict(entropy=0.0, top1=0.0)
    stats = {c: dict(agree=0, kl_sum=0.0, kl_max=0.0, miss_gap=0.0,
                     encoded=0, attended=0) for c in codecs}

    def score(ref_logits, logits, attended):
        """Compare each codec's logits with the reference's; the reference's
        greedy tokens."""
        ref_logp = ref_logits.double().log_softmax(-1)
        p_ref = ref_logp.exp()
        want = ref_logp.argmax(-1)
        ref_stats["entropy"] += float(-(p_ref * ref_logp).sum())
        ref_stats["top1"] += float(p_ref.max(-1).values.sum())
        for c in codecs:
            logp = logits[c].double().log_softmax(-1)
            kl = (p_ref * (ref_logp - logp)).sum(-1)
            s, g = stats[c], s_group[c]
            got = logp.argmax(-1)
            s["agree"] += int((got == want).sum())
            gap = ref_logp.gather(-1, want[:, None]) - \
                ref_logp.gather(-1, got[:, None])
            s["miss_gap"] = max(s["miss_gap"], float(gap.max()))
            s["kl_sum"] += float(kl.sum())
            s["kl_max"] = max(s["kl_max"], float(kl.max()))
            if c != "none":
                s["encoded"] += sum(n // g * g for n in attended)
            s["attended"] += sum(attended)
        return want.tolist()

    def open_cache(name, codec):
        return KvflashCache(cfg, os.path.join(tmp, name), kv_dtype,
                            len(prompts), codec=codec, **opts)

    try:
        ref = open_cache("reference", "none")
        for c in codecs:
            caches[c] = open_cache(c, c)
        s_group = {c: kc.st.group_tokens for c, kc in caches.items()}

        def first(kc):
            return torch.cat([model.logits(prefill(model, kc, b, p, 32))
                              for b, p in enumerate(prompts)])
        lens = [len(p) for p in prompts]
        nxt = score(first(ref), {c: first(kc) for c, kc in caches.items()},
                    lens)
        for _ in range(steps - 1):
            ref_logits = step_logits(model, ref, nxt, lens, seqs)
            logits = {c: step_logits(model, kc, nxt, lens, seqs)
                      for c, kc in caches.items()}
            lens = [n + 1 for n in lens]
            nxt = score(ref_logits, logits, lens)
    finally:
        for kc in [ref] + list(caches.values()):
            if kc is not None:
                kc.close()
    n = steps * len(prompts)
    return dict(
        steps=steps, sequences=len(prompts),
        prompt_tokens=[len(p) for p in prompts],
        reference=dict(entropy_mean=ref_stats["entropy"] / n,
                       top1_mean=ref_stats["top1"] / n),
        codecs={c: dict(group_tokens=s_group[c], agreement=s["agree"] / n,
                        kl_mean=s["kl_sum"] / n, kl_max=s["kl_max"],
                        miss_gap_max=s["miss_gap"],
                        encoded_share=s["encoded"] / s["attended"])
                for c, s in stats.items()})


def compare(args):
    _, model, prompts = model_and_prompts(args.seed)
    codecs = args.codecs.split(",")
    for c in codecs:
        if c not in ("none",) + CODECS:
            print("torch_decode.py: --codecs: %r is not one of none, %s" % (
                c, ", ".join(CODECS)), file=sys.stderr)
            return 2
    if unknown_dtype("--dtype", [args.dtype]):
        return 2
    steps = 512 if args.steps is None else args.steps
    if steps < 1:  # a caller of compare() that skipped main's parser
        print("torch_decode.py: --steps: %d is not a count of steps" % steps,
              file=sys.stderr)
        return 2
    tmp = tempfile.mkdtemp(prefix="kvflash-codecs-", dir=args.dir)
    try:
        r = compare_codecs(model, prompts, steps, codecs, DTYPES[args.dtype],
                           tmp, n_threads=2)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        r.update(dtype=args.dtype, seed=args.seed)
        print(json.dumps(r, indent=2))
        return 0
    print("%d sequences x %d steps, %s K/V (prompts %s), each codec's store "
          "teacher-forced on the uncompressed store's greedy tokens; "
          "reference: mean entropy %.3f nats, mean top-1 probability %.3f" % (
              r["sequences"], steps, args.dtype, r["prompt_tokens"],
              r["reference"]["entropy_mean"], r["reference"]["top1_mean"]))
    print("%-5s %5s %8s %10s %10s %10s %9s" % (
        "codec", "G", "encoded", "agreement", "mean KL", "max KL",
        "miss gap"))
    for c, f in r["codecs"].items():
        print("%-5s %5d %8.3f %9.2f%% %10.2e %10.2e %9.2e" % (
            c, f["group_tokens"], f["encoded_share"], 100 * f["agreement"],
            f["kl_mean"], f["kl_max"], f["miss_gap_max"]))
    return 0


BENCH_ROWS = ("torch", "kvflash-memory", "kvflash-memory-overlap",
              "kvflash-file", "kvflash-file-overlap")


def count(text):
    """argparse: a count of one or more"""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("%r is not a number" % text)
    if v < 1:
        raise argparse.ArgumentTypeError("%d is not a count (1 or more)" % v)
    return v


def directory(text):
    """argparse: a directory that exists"""
    if not os.path.isdir(text):
        raise argparse.ArgumentTypeError("%s is not a directory" % text)
    return text


def gib(text):
    """argparse: a size in GiB, 0 or more"""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("%r is not a number" % text)
    if not v >= 0 or math.isinf(v):
        raise argparse.ArgumentTypeError("%s is not a size in GiB" % text)
    return v


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench", action="store_true",
                    help="measure tokens/s instead of checking tokens")
    ap.add_argument("--dtypes", default="f16,bf16,f32",
                    help="check: K/V dtypes to check (default all)")
    ap.add_argument("--new", type=count, default=24,
                    help="check: tokens to generate per sequence")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--compare", action="store_true",
                    help="greedy agreement and KL of each codec's store "
                    "against the uncompressed store's")
    ap.add_argument("--codecs", default=",".join(CODECS),
                    help="compare: codecs (default all)")
    ap.add_argument("--json", action="store_true",
                    help="compare: the figures as JSON")
    ap.add_argument("--dtype", default="f16",
                    help="bench, compare: K/V dtype")
    ap.add_argument("--batch", type=count, default=8)
    ap.add_argument("--context", type=count, default=4096,
                    help="bench: context tokens per sequence")
    ap.add_argument("--layers", type=count, default=8)
    ap.add_argument("--steps", type=count, default=None,
                    help="bench: timed decode steps (default 8); compare: "
                    "steps per sequence (default 512)")
    ap.add_argument("--limit-gib", type=gib, default=0,
                    help="bench: cap the data memory (RLIMIT_DATA) at this")
    ap.add_argument("--capacity-gib", type=count, default=16)
    ap.add_argument("--only", default="",
                    help="bench: comma-separated rows to run")
    ap.add_argument("--dir", type=directory, default=None,
                    help="bench, compare: where stores go (default: $TMPDIR)")
    args = ap.parse_args()
    for row in args.only.split(",") if args.only else ():
        if row not in BENCH_ROWS:
            ap.error("--only: %r is not one of %s" % (row,
                                                      ", ".join(BENCH_ROWS)))
    if (unknown_dtype("--dtype", [args.dtype]) or
            unknown_dtype("--dtypes", args.dtypes.split(","))):
        return 2
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    if args.compare:
        return compare(args)
    if args.steps is None:
        args.steps = 8
    return bench(args) if args.bench else check(args)


if __name__ == "__main__":
    sys.exit(main())
