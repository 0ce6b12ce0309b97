/*
 * bench_attend_model.c - `kvbench attend --model DIR`: what SparF costs a
 * trained model, as perplexity, not as the cosine to dense attention of a
 * synthetic head.
 *
 * DIR holds a llama2.c version-0 checkpoint, DIR/tinypy.bin (a header of
 * 7 int32, then float32 weights; the README beside the tinypy model says
 * the layout), and DIR/val.bin, held-out token ids (uint16).  The model runs
 * token by token as a decoder does: each layer's K and V of the new token
 * are appended to a sequence of a memory store (f32, K^T pages), and the
 * layer's attention is kvf_attend over the sequence, dense or SparF.
 * Every window (n_windows of window tokens, spread evenly over val.bin;
 * the model was trained on 128-token windows) is a fresh sequence from
 * position 0; the loss of each token after the first is the cross
 * entropy of the next one, and perplexity is exp(mean loss).
 *
 * Modes, one after the other on the same windows: a reference (attention
 * in this file, double precision, no store), dense kvf_attend, and SparF
 * by tokens (sparse = 1) and by groups (sparse = 2) at 1/8 and 1/4 of the
 * dims (top_r) and tokens (top_k, of the tokens so far), the store's
 * defaults for the exact set; and by groups at 1/8 with no sinks and no
 * recent window (the scores alone), to show what the exact set costs;
 * then H2O eviction inside the sequence (kvf_h2o_evict) keeping 1/2 and
 * 1/4 of the tokens: dense attention accumulating H2O scores, and after
 * every token each KV head of each layer drops its least valued whole
 * token groups down to the budget (the defaults: the first group and a recent window of
 * half the budget stay).  Every store mode but dense also keeps the
 * window's full sequence beside it and prints the mean cosine, per query
 * head and layer and token, of its attention output against dense
 * attention over the full sequence for the same query.
 * The RMSNorm, projections (compute/proj.c, weights transposed to
 * [in][out] at load), rotary embedding (interleaved pairs, as llama2.c)
 * and SwiGLU are plain C.
 *
 * With --codec, the reference and dense only, then dense over the
 * uncompressed store and over a store of the codec in lockstep, both fed
 * val.bin's tokens: the codec's perplexity, and per token the argmax
 * agreement and KL(p_dense || p_codec); over all tokens and over those
 * whose context holds a sealed (encoded) group, since a token before the
 * first G attends exact rows only.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/alloc.h"
#include "bench/bench_attend_int.h"
#include "bench/bench_common.h"
#include "compute/proj.h"
#include "kvflash.h"

#define MODEL_SEQ 1u
#define MODEL_FULL 2u         /* the full sequence, for the cosine */
#define MODEL_EPS 1e-5f       /* RMSNorm's epsilon (train_tiny.py) */
#define MODEL_THETA 10000.0   /* RoPE base */

struct weights {
	uint32_t dim, hidden, n_layers, n_heads, n_kv_heads, vocab, max_seq;
	uint32_t head_dim, kv_dim;
	float *emb;      /* [vocab][dim] */
	float *rms_att;  /* [L][dim] */
	float *wq, *wk, *wv, *wo; /* [L][in][out] (transposed at load) */
	float *rms_ffn;  /* [L][dim] */
	float *w1, *w2, *w3; /* [L][in][out] */
	float *rms_out;  /* [dim] */
	float *wcls;     /* [dim][vocab] */
	void *mem;       /* every array above, one allocation */
};

/* The modes measured, in the order printed. */
static const struct model_mode {
	const char *name;
	uint32_t sparse;    /* 0 dense; 1, 2 SparF */
	uint32_t share;     /* SparF: 1/share of the dims and tokens */
	int reference;      /* attention computed here, not by the store */
	int scores_only;    /* no sinks, no recent window */
	double h2o_keep;    /* H2O eviction keeping this share; 0 none */
} model_modes[] = {
	{ "reference", 0, 0, 1, 0, 0 },
	{ "dense", 0, 0, 0, 0, 0 },
	{ "tokens 1/8", 1, 8, 0, 0, 0 },
	{ "groups 1/8", 2, 8, 0, 0, 0 },
	{ "groups 1/8 scores only", 2, 8, 0, 1, 0 },
	{ "tokens 1/4", 1, 4, 0, 0, 0 },
	{ "groups 1/4", 2, 4, 0, 0, 0 },
	{ "H2O keep 1/2", 0, 0, 0, 0, 0.5 },
	{ "H2O keep 1/4", 0, 0, 0, 0, 0.25 },
};

/* with_full - mode m keeps the full sequence beside its own for the
 * cosine */
static int with_full(const struct model_mode *m)
{
	return !m->reference && (m->sparse || m->h2o_keep > 0);
}
#define N_MODEL_MODES (sizeof(model_modes) / sizeof(model_modes[0]))

struct run {
	const struct weights *w;
	kvf_store *st;
	float *x, *h, *q, *k, *v, *att, *o, *h1, *h3, *logits, *xrow;
	double *ref_k, *ref_v; /* reference mode: [L][window][kv_dim] */
	uint32_t window;
	uint32_t group_tokens; /* the store's G */
	float *att_full;       /* dense attention over MODEL_FULL */
	double cos_sum;        /* cosines to it, per query head */
	uint64_t cos_n;
	uint64_t win_dropped;  /* H2O: tokens the window's KV heads dropped */
	uint64_t kept_sum;     /* tokens the KV heads kept at windows' ends */
	uint64_t kept_n;       /* of these many */
};

static int read_file(const char *path, void **buf, size_t *len)
{
	FILE *f = fopen(path, "rb");
	long n;

	if (f == NULL)
		return -1;
	if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 ||
	    fseek(f, 0, SEEK_SET) != 0 || (*buf = malloc((size_t)n + 1)) == NULL) {
		fclose(f);
		return -1;
	}
	if (fread(*buf, 1, (size_t)n, f) != (size_t)n) {
		free(*buf);
		fclose(f);
		return -1;
	}
	fclose(f);
	*len = (size_t)n;
	return 0;
}

/* transpose - src [rows][cols] into dst [cols][rows] */
static void transpose(float *dst, const float *src, uint32_t rows, uint32_t cols)
{
	for (uint32_t r = 0; r < rows; r++)
		for (uint32_t c = 0; c < cols; c++)
			dst[(size_t)c * rows + r] = src[(size_t)r * cols + c];
}

/* load_weights - the checkpoint at path into w; 0, or -1 with a message */
static int load_weights(const char *path, struct weights *w)
{
	int32_t hdr[7];
	void *buf;
	size_t len, need, at;
	const float *src;
	float *dst;
	uint32_t D, HID, L, KVD;

	if (read_file(path, &buf, &len) != 0) {
		fprintf(stderr, "kvbench attend: %s: %s\n", path, strerror(errno));
		return -1;
	}
	if (len < sizeof(hdr))
		goto bad;
	memcpy(hdr, buf, sizeof(hdr));
	for (int i = 0; i < 7; i++)
		if (i != 5 && hdr[i] <= 0)
			goto bad;
	w->dim = (uint32_t)hdr[0];
	w->hidden = (uint32_t)hdr[1];
	w->n_layers = (uint32_t)hdr[2];
	w->n_heads = (uint32_t)hdr[3];
	w->n_kv_heads = (uint32_t)hdr[4];
	w->vocab = (uint32_t)(hdr[5] < 0 ? -hdr[5] : hdr[5]);
	w->max_seq = (uint32_t)hdr[6];
	if (w->dim % w->n_heads || w->n_heads % w->n_kv_heads || w->vocab == 0 ||
	    (w->dim / w->n_heads) % 2 || w->dim > 16384 || w->hidden > 65536 ||
	    w->n_layers > 256 || w->vocab > (1u << 20))
		goto bad;
	w->head_dim = w->dim / w->n_heads;
	w->kv_dim = w->n_kv_heads * w->head_dim;
	D = w->dim;
	HID = w->hidden;
	L = w->n_layers;
	KVD = w->kv_dim;
	/* as stored: emb, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3,
	 * rms_out, two RoPE tables, then the classifier unless shared */
	need = (size_t)w->vocab * D + (size_t)L * D +
	       (size_t)L * D * (2 * (size_t)D + 2 * KVD) + (size_t)L * D +
	       (size_t)L * 3 * D * HID + D +
	       (size_t)w->max_seq * w->head_dim +
	       (hdr[5] < 0 ? (size_t)w->vocab * D : 0);
	if (len != sizeof(hdr) + need * sizeof(float))
		goto bad;
	w->mem = kvf_malloc((need + (size_t)w->vocab * D) * sizeof(float));
	if (w->mem == NULL) {
		free(buf);
		fprintf(stderr, "kvbench attend: out of memory for %s\n", path);
		return -1;
	}
	src = (const float *)((const char *)buf + sizeof(hdr));
	dst = w->mem;
	at = 0;
#define TAKE(field, n) do { \
		w->field = dst; memcpy(dst, src + at, (n) * sizeof(float)); \
		dst += (n); at += (n); } while (0)
#define TAKE_T(field, rows, cols) do { \
		w->field = dst; \
		for (uint32_t l_ = 0; l_ < L; l_++) \
			transpose(dst + (size_t)l_ * (rows) * (cols), \
				  src + at + (size_t)l_ * (rows) * (cols), (rows), (cols)); \
		dst += (size_t)L * (rows) * (cols); \
		at += (size_t)L * (rows) * (cols); } while (0)
	TAKE(emb, (size_t)w->vocab * D);
	TAKE(rms_att, (size_t)L * D);
	TAKE_T(wq, D, D);
	TAKE_T(wk, KVD, D);
	TAKE_T(wv, KVD, D);
	TAKE_T(wo, D, D);
	TAKE(rms_ffn, (size_t)L * D);
	TAKE_T(w1, HID, D);
	TAKE_T(w2, D, HID);
	TAKE_T(w3, HID, D);
	TAKE(rms_out, D);
	at += (size_t)w->max_seq * w->head_dim; /* cos and sin: unused */
	w->wcls = dst;
	transpose(dst, hdr[5] < 0 ? src + at : w->emb, w->vocab, D);
#undef TAKE
#undef TAKE_T
	free(buf);
	return 0;
bad:
	free(buf);
	fprintf(stderr, "kvbench attend: %s is not a llama2.c version-0 checkpoint (%zu bytes)\n",
		path, len);
	return -1;
}

static void rmsnorm(float *out, const float *x, const float *g, uint32_t n)
{
	double ss = 0;

	for (uint32_t i = 0; i < n; i++)
		ss += (double)x[i] * x[i];
	ss = 1.0 / sqrt(ss / n + MODEL_EPS);
	for (uint32_t i = 0; i < n; i++)
		out[i] = (float)(x[i] * ss) * g[i];
}

/* rope - llama2.c's rotation: pairs (2i, 2i + 1) of each head */
static void rope(float *v, uint32_t n_heads, uint32_t hd, uint32_t pos)
{
	for (uint32_t i = 0; i < hd / 2; i++) {
		double a = pos / pow(MODEL_THETA, 2.0 * i / hd);
		float c = (float)cos(a), s = (float)sin(a);

		for (uint32_t h = 0; h < n_heads; h++) {
			float *p = v + (size_t)h * hd + 2 * i, x0 = p[0], x1 = p[1];

			p[0] = x0 * c - x1 * s;
			p[1] = x0 * s + x1 * c;
		}
	}
}

/* reference_attend - softmax(q k / sqrt(hd)) v over tokens 0..t of layer
 * l, in double */
static void reference_attend(struct run *r, uint32_t l, uint32_t t)
{
	const struct weights *w = r->w;
	uint32_t hd = w->head_dim, g = w->n_heads / w->n_kv_heads;
	const double *K = r->ref_k + (size_t)l * r->window * w->kv_dim;
	const double *V = r->ref_v + (size_t)l * r->window * w->kv_dim;
	double *s = malloc((t + 1) * sizeof(double));

	for (uint32_t h = 0; h < w->n_heads; h++) {
		uint32_t kh = h / g;
		double m = -INFINITY, sum = 0;

		for (uint32_t j = 0; j <= t; j++) {
			double d = 0;

			for (uint32_t e = 0; e < hd; e++)
				d += (double)r->q[(size_t)h * hd + e] *
				     K[(size_t)j * w->kv_dim + kh * hd + e];
			s[j] = d / sqrt((double)hd);
			m = s[j] > m ? s[j] : m;
		}
		for (uint32_t j = 0; j <= t; j++)
			sum += (s[j] = exp(s[j] - m));
		for (uint32_t e = 0; e < hd; e++) {
			double o = 0;

			for (uint32_t j = 0; j <= t; j++)
				o += s[j] * V[(size_t)j * w->kv_dim + kh * hd + e];
			r->att[(size_t)h * hd + e] = (float)(o / sum);
		}
	}
	free(s);
}

/* step - token tok at position t through the model; the logits in
 * r->logits.  0, or -1 with the store's failure printed. */
static int step(struct run *r, const struct model_mode *m, uint32_t tok,
		uint32_t t)
{
	const struct weights *w = r->w;
	uint32_t D = w->dim, KVD = w->kv_dim, HID = w->hidden, hd = w->head_dim;
	kvf_attn_opts ao;
	kvf_status rc;

	memcpy(r->x, w->emb + (size_t)tok * D, D * sizeof(float));
	kvf_attn_opts_init(&ao);
	ao.h2o = m->h2o_keep > 0;
	if (m->sparse) {
		uint32_t len = t + 1;

		ao.sparse = m->sparse;
		ao.top_r = (hd + m->share - 1) / m->share;
		ao.top_k = (len + m->share - 1) / m->share;
		if (m->scores_only)
			ao.sink_tokens = ao.recent_tokens = KVF_TOKENS_NONE;
	}
	for (uint32_t l = 0; l < w->n_layers; l++) {
		rmsnorm(r->h, r->x, w->rms_att + (size_t)l * D, D);
		kvc_project(r->h, KVF_DTYPE_F32, 1, D, w->wq + (size_t)l * D * D, D,
			    r->q, r->xrow);
		kvc_project(r->h, KVF_DTYPE_F32, 1, D, w->wk + (size_t)l * D * KVD,
			    KVD, r->k, r->xrow);
		kvc_project(r->h, KVF_DTYPE_F32, 1, D, w->wv + (size_t)l * D * KVD,
			    KVD, r->v, r->xrow);
		rope(r->q, w->n_heads, hd, t);
		rope(r->k, w->n_kv_heads, hd, t);
		if (m->reference) {
			for (uint32_t i = 0; i < KVD; i++) {
				size_t at = ((size_t)l * r->window + t) * KVD + i;

				r->ref_k[at] = r->k[i];
				r->ref_v[at] = r->v[i];
			}
			reference_attend(r, l, t);
		} else {
			if ((rc = kvf_append(r->st, MODEL_SEQ, l, 1, r->k, r->v)) != KVF_OK)
				return bench_fail("attend", "kvf_append", rc);
			if ((rc = kvf_attend(r->st, MODEL_SEQ, l, r->q, r->att, &ao)) != KVF_OK)
				return bench_fail("attend", "kvf_attend", rc);
			if (with_full(m) &&
			    ((rc = kvf_append(r->st, MODEL_FULL, l, 1, r->k, r->v)) != KVF_OK ||
			     (rc = kvf_attend(r->st, MODEL_FULL, l, r->q, r->att_full,
					      NULL)) != KVF_OK))
				return bench_fail("attend", "kvf_attend (full sequence)", rc);
			for (uint32_t h = 0; with_full(m) && h < w->n_heads; h++) {
				const float *a = r->att + (size_t)h * hd;
				const float *b = r->att_full + (size_t)h * hd;
				double ab = 0, aa = 0, bb = 0;

				for (uint32_t e = 0; e < hd; e++) {
					ab += (double)a[e] * b[e];
					aa += (double)a[e] * a[e];
					bb += (double)b[e] * b[e];
				}
				r->cos_sum += aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : 1.0;
				r->cos_n++;
			}
		}
		kvc_project(r->att, KVF_DTYPE_F32, 1, D, w->wo + (size_t)l * D * D, D,
			    r->o, r->xrow);
		for (uint32_t i = 0; i < D; i++)
			r->x[i] += r->o[i];
		rmsnorm(r->h, r->x, w->rms_ffn + (size_t)l * D, D);
		kvc_project(r->h, KVF_DTYPE_F32, 1, D, w->w1 + (size_t)l * D * HID,
			    HID, r->h1, r->xrow);
		kvc_project(r->h, KVF_DTYPE_F32, 1, D, w->w3 + (size_t)l * D * HID,
			    HID, r->h3, r->xrow);
		for (uint32_t i = 0; i < HID; i++)
			r->h1[i] = r->h1[i] / (1.0f + expf(-r->h1[i])) * r->h3[i];
		kvc_project(r->h1, KVF_DTYPE_F32, 1, HID, w->w2 + (size_t)l * HID * D,
			    D, r->o, r->xrow);
		for (uint32_t i = 0; i < D; i++)
			r->x[i] += r->o[i];
	}
	rmsnorm(r->h, r->x, w->rms_out, D);
	kvc_project(r->h, KVF_DTYPE_F32, 1, D, w->wcls, w->vocab, r->logits,
		    r->xrow);
	return 0;
}

/* nll - -log softmax(logits)[target] */
static double nll(const float *logits, uint32_t n, uint32_t target)
{
	double m = -INFINITY, s = 0;

	for (uint32_t i = 0; i < n; i++)
		m = logits[i] > m ? logits[i] : m;
	for (uint32_t i = 0; i < n; i++)
		s += exp(logits[i] - m);
	return m + log(s) - logits[target];
}

/* h2o_drop - after token len - 1: every layer of the window's sequence
 * keeps `keep` of its len tokens (kvf_h2o_evict's defaults otherwise) */
static kvf_status h2o_drop(struct run *r, double keep, uint64_t len)
{
	kvf_h2o_evict_opts o;
	uint64_t dropped;
	kvf_status rc;

	kvf_h2o_evict_opts_init(&o);
	o.keep = keep;
	(void)len;
	rc = kvf_h2o_evict(r->st, MODEL_SEQ, KVF_LAYER_ALL, &o, &dropped);
	if (rc == KVF_OK)
		r->win_dropped += dropped;
	return rc;
}

/* run_mode - mean loss of mode m over the windows; 0, or -1 */
static int run_mode(struct run *r, const struct model_mode *m,
		    const uint16_t *ids, size_t n_ids, uint32_t n_windows,
		    double *mean)
{
	double sum = 0;
	uint64_t n = 0;
	size_t stride = n_windows > 1 ? (n_ids - r->window - 1) / (n_windows - 1) : 0;
	kvf_status rc;

	for (uint32_t wi = 0; wi < n_windows; wi++) {
		const uint16_t *tok = ids + (size_t)wi * stride;

		if (!m->reference && (rc = kvf_seq_create(r->st, MODEL_SEQ)) != KVF_OK)
			return bench_fail("attend", "kvf_seq_create", rc);
		if (with_full(m) && (rc = kvf_seq_create(r->st, MODEL_FULL)) != KVF_OK)
			return bench_fail("attend", "kvf_seq_create", rc);
		for (uint32_t t = 0; t < r->window; t++) {
			if (tok[t] >= r->w->vocab || tok[t + 1] >= r->w->vocab) {
				fprintf(stderr, "kvbench attend: val.bin holds token %u, past the vocabulary (%u)\n",
					tok[t] > tok[t + 1] ? tok[t] : tok[t + 1], r->w->vocab);
				return -1;
			}
			if (step(r, m, tok[t], t) != 0)
				return -1;
			sum += nll(r->logits, r->w->vocab, tok[t + 1]);
			n++;
			if (m->h2o_keep > 0 &&
			    (rc = h2o_drop(r, m->h2o_keep, t + 1)) != KVF_OK)
				return bench_fail("attend", "kvf_h2o_evict", rc);
		}
		/* dropped counts each KV head's own */
		r->kept_sum += (uint64_t)r->window * r->w->n_layers *
				       r->w->n_kv_heads - r->win_dropped;
		r->kept_n += (uint64_t)r->window * r->w->n_layers * r->w->n_kv_heads;
		r->win_dropped = 0;
		if (!m->reference && (rc = kvf_seq_free(r->st, MODEL_SEQ)) != KVF_OK)
			return bench_fail("attend", "kvf_seq_free", rc);
		if (with_full(m) && (rc = kvf_seq_free(r->st, MODEL_FULL)) != KVF_OK)
			return bench_fail("attend", "kvf_seq_free", rc);
	}
	*mean = sum / (double)n;
	return 0;
}

/* What a codec's store changes against the uncompressed one, token by
 * token on the same windows: both are fed val.bin's tokens, so each
 * token's next-token distributions have the same context. */
struct codec_figs {
	double loss;            /* mean loss with the codec's store */
	double agreement;       /* share of tokens whose argmax is dense's */
	double kl_mean, kl_max; /* KL(p_dense || p_codec), nats */
	/* the same over the tokens whose context holds a sealed group (the
	 * others attend exact rows only), and their share */
	double coded_share, coded_agreement, coded_kl_mean;
	double coded_vs_dense;  /* their perplexity against dense's, - 1 */
	double attended_coded;  /* share of the attended tokens (summed over
				 * the tokens) that lay in sealed groups */
};

/* kl_logits - KL(softmax(p) || softmax(q)) of n logits, nats; *same: 1
 * when both have the same argmax */
static double kl_logits(const float *p, const float *q, uint32_t n, int *same)
{
	double mp = -INFINITY, mq = -INFINITY, sp = 0, sq = 0, kl = 0;
	uint32_t ap = 0, aq = 0;

	for (uint32_t i = 0; i < n; i++) {
		if (p[i] > mp)
			mp = p[i], ap = i;
		if (q[i] > mq)
			mq = q[i], aq = i;
	}
	for (uint32_t i = 0; i < n; i++) {
		sp += exp(p[i] - mp);
		sq += exp(q[i] - mq);
	}
	mp += log(sp); /* now the log-sum-exp of each */
	mq += log(sq);
	for (uint32_t i = 0; i < n; i++) {
		double lp = p[i] - mp, lq = q[i] - mq;

		kl += exp(lp) * (lp - lq);
	}
	*same = ap == aq;
	return kl;
}

/* run_codec - dense attention over r->st and over codec_st in lockstep on
 * the windows (which run_mode has checked); 0, or -1 */
static int run_codec(struct run *r, kvf_store *codec_st, uint32_t g,
		     const uint16_t *ids, size_t n_ids, uint32_t n_windows,
		     struct codec_figs *f)
{
	const struct model_mode *dense = &model_modes[1];
	kvf_store *st[2] = { r->st, codec_st };
	uint32_t V = r->w->vocab;
	size_t stride = n_windows > 1 ? (n_ids - r->window - 1) / (n_windows - 1) : 0;
	float *ref = malloc(V * sizeof(float));
	double loss = 0, kl_sum = 0, kl_coded = 0;
	double loss_coded[2] = { 0, 0 }; /* dense, codec */
	uint64_t n = 0, agree = 0, n_coded = 0, agree_coded = 0;
	uint64_t attended = 0, attended_coded = 0;
	kvf_status rc;
	int ret = -1;

	if (ref == NULL) {
		fprintf(stderr, "kvbench attend: out of memory\n");
		return -1;
	}
	memset(f, 0, sizeof(*f));
	for (uint32_t wi = 0; wi < n_windows; wi++) {
		const uint16_t *tok = ids + (size_t)wi * stride;

		for (int i = 0; i < 2; i++)
			if ((rc = kvf_seq_create(st[i], MODEL_SEQ)) != KVF_OK) {
				bench_fail("attend", "kvf_seq_create", rc);
				goto out;
			}
		for (uint32_t t = 0; t < r->window; t++) {
			double kl, nl;
			int same;

			r->st = st[0];
			if (step(r, dense, tok[t], t) != 0)
				goto out;
			memcpy(ref, r->logits, V * sizeof(float));
			r->st = st[1];
			if (step(r, dense, tok[t], t) != 0)
				goto out;
			nl = nll(r->logits, V, tok[t + 1]);
			loss += nl;
			kl = kl_logits(ref, r->logits, V, &same);
			kl_sum += kl;
			f->kl_max = kl > f->kl_max ? kl : f->kl_max;
			agree += (uint64_t)same;
			n++;
			/* tokens 0..t attended; whole groups of g are sealed */
			attended += t + 1;
			attended_coded += (t + 1) / g * g;
			if (t + 1 >= g) {
				kl_coded += kl;
				loss_coded[0] += nll(ref, V, tok[t + 1]);
				loss_coded[1] += nl;
				agree_coded += (uint64_t)same;
				n_coded++;
			}
		}
		for (int i = 0; i < 2; i++)
			if ((rc = kvf_seq_free(st[i], MODEL_SEQ)) != KVF_OK) {
				bench_fail("attend", "kvf_seq_free", rc);
				goto out;
			}
	}
	f->loss = loss / (double)n;
	f->agreement = (double)agree / (double)n;
	f->kl_mean = kl_sum / (double)n;
	f->coded_share = (double)n_coded / (double)n;
	/* no token after a sealed group: no figure (JSON null), not 0 */
	f->coded_agreement = n_coded ? (double)agree_coded / (double)n_coded : NAN;
	f->coded_kl_mean = n_coded ? kl_coded / (double)n_coded : NAN;
	f->coded_vs_dense = n_coded ? exp((loss_coded[1] - loss_coded[0]) /
					  (double)n_coded) - 1 : NAN;
	f->attended_coded = (double)attended_coded / (double)attended;
	ret = 0;
out:
	r->st = st[0];
	free(ref);
	return ret;
}

static int open_store(const char *dir, const struct weights *w, uint32_t window,
		      kvf_codec codec, kvf_store **st)
{
	kvf_model model = { .n_layers = w->n_layers, .n_q_heads = w->n_heads,
			    .n_kv_heads = w->n_kv_heads, .head_dim = w->head_dim,
			    .dtype = KVF_DTYPE_F32 };
	kvf_options o;
	uint64_t kv = (uint64_t)window * w->n_layers * w->kv_dim * 4 * 2;
	kvf_status rc;

	kvf_options_init(&o, &model);
	o.media = KVF_MEDIA_MEMORY;
	o.kt_pages = 1;
	o.n_threads = 1;
	o.dram_budget = 0;
	o.codec = codec;
	o.segment_size = 256u << 10;
	/* K, V and K^T of one window, page-rounded per stream, with room */
	o.capacity_bytes = (8 * kv + (64u << 20)) / o.segment_size * o.segment_size;
	if ((rc = kvf_open(dir, &o, st)) != KVF_OK)
		return bench_fail("attend", "kvf_open (memory store)", rc);
	return 0;
}

static uint32_t group_tokens(kvf_store *st)
{
	kvf_store_info info;

	memset(&info, 0, sizeof(info));
	info.struct_size = sizeof(info);
	return kvf_store_info_get(st, &info) == KVF_OK ? info.group_tokens : 0;
}

/* model_path - DIR/tinypy.bin */
static char *model_path(const char *dir)
{
	size_t n = strlen(dir) + 16;
	char *p = malloc(n);

	if (p != NULL)
		snprintf(p, n, "%s/tinypy.bin", dir);
	return p;
}

int attend_model_main(const struct attend_args *a)
{
	struct weights w = { 0 };
	struct run r = { .w = &w, .window = a->window };
	double loss[N_MODEL_MODES];
	struct codec_figs cf = { 0 };
	kvf_store *codec_st = NULL;
	uint32_t codec_group = 0; /* G of the codec's store */
	double cosine[N_MODEL_MODES], kept[N_MODEL_MODES];
	/* with --codec: the reference and dense, then dense with the codec */
	uint32_t n_modes = a->codec != KVF_CODEC_NONE ? 2 : N_MODEL_MODES;
	const char *cname = kvf_codec_name(a->codec);
	char *path = model_path(a->model_dir), *val_path = NULL, *store_dir = NULL;
	char *codec_dir = NULL;
	void *ids = NULL;
	size_t n_bytes = 0, n_ids;
	int rc = 1;

	if (path == NULL || load_weights(path, &w) != 0)
		goto out;
	if ((val_path = malloc(strlen(a->model_dir) + 16)) == NULL)
		goto out;
	sprintf(val_path, "%s/val.bin", a->model_dir);
	if (read_file(val_path, &ids, &n_bytes) != 0) {
		fprintf(stderr, "kvbench attend: %s: %s\n", val_path, strerror(errno));
		goto out;
	}
	n_ids = n_bytes / 2;
	if (r.window > w.max_seq || n_ids < (size_t)r.window + 2) {
		fprintf(stderr, "kvbench attend: --window %u is too long: the model holds %u positions, %s %zu tokens\n",
			r.window, w.max_seq, val_path, n_ids);
		goto out;
	}
	if ((store_dir = malloc(strlen(a->dir) + 16)) == NULL ||
	    (codec_dir = malloc(strlen(a->dir) + 16)) == NULL)
		goto out;
	sprintf(store_dir, "%s/model", a->dir);
	sprintf(codec_dir, "%s/model-codec", a->dir);
	if (bench_make_dir("attend", a->dir, NULL) != 0 ||
	    bench_remove_store(store_dir) != 0 ||
	    bench_remove_store(codec_dir) != 0 ||
	    open_store(store_dir, &w, r.window, KVF_CODEC_NONE, &r.st) != 0)
		goto out;
	r.group_tokens = group_tokens(r.st);
	{
		size_t f = 4 * (size_t)w.dim + 3 * (size_t)w.hidden + w.vocab +
			   2 * (size_t)w.kv_dim + w.dim + w.hidden;
		size_t refs = (size_t)w.n_layers * r.window * w.kv_dim;

		r.x = kvf_calloc(f, sizeof(float));
		r.ref_k = kvf_calloc(2 * refs, sizeof(double));
		r.att_full = kvf_calloc(w.dim, sizeof(float));
		if (r.x == NULL || r.ref_k == NULL || r.att_full == NULL) {
			fprintf(stderr, "kvbench attend: out of memory\n");
			goto out;
		}
		r.ref_v = r.ref_k + refs;
		r.h = r.x + w.dim;
		r.q = r.h + w.dim;
		r.att = r.q + w.dim;
		r.o = r.att + w.dim;
		r.h1 = r.o + w.dim;
		r.h3 = r.h1 + w.hidden;
		r.k = r.h3 + w.hidden;
		r.v = r.k + w.kv_dim;
		r.logits = r.v + w.kv_dim;
		r.xrow = r.logits + w.vocab;
	}
	for (uint32_t i = 0; i < n_modes; i++) {
		uint64_t t0 = bench_now_ns();

		r.cos_sum = 0;
		r.cos_n = r.kept_sum = r.kept_n = 0;
		if (run_mode(&r, &model_modes[i], ids, n_ids, a->windows, &loss[i]) != 0)
			goto out;
		cosine[i] = r.cos_n ? r.cos_sum / (double)r.cos_n : 1.0;
		kept[i] = model_modes[i].h2o_keep > 0
				  ? (double)r.kept_sum / (double)r.kept_n : 1.0;
		if (!a->json)
			fprintf(stderr, "kvbench attend: %-24s %.2f s\n", model_modes[i].name,
				(double)(bench_now_ns() - t0) / 1e9);
	}
	if (a->codec != KVF_CODEC_NONE) {
		if (open_store(codec_dir, &w, r.window, a->codec, &codec_st) != 0)
			goto out;
		if ((codec_group = group_tokens(codec_st)) == 0) {
			fprintf(stderr, "kvbench attend: kvf_store_info_get of the %s store failed\n",
				cname);
			goto out;
		}
		if (run_codec(&r, codec_st, codec_group, ids, n_ids, a->windows,
			      &cf) != 0)
			goto out;
	}
	if (a->json) {
		struct bench_json j = { .f = stdout };

		bench_json_begin(&j, NULL);
		bench_json_str(&j, "benchmark", "attend-model");
		bench_json_str(&j, "model", path);
		bench_json_u64(&j, "windows", a->windows);
		bench_json_u64(&j, "window_tokens", r.window);
		bench_json_u64(&j, "group_tokens", r.group_tokens);
		for (uint32_t i = 0; i < n_modes; i++) {
			bench_json_begin(&j, model_modes[i].name);
			bench_json_double(&j, "loss", loss[i]);
			bench_json_double(&j, "perplexity", exp(loss[i]));
			bench_json_double(&j, "vs_dense", exp(loss[i] - loss[1]) - 1);
			bench_json_double(&j, "cosine_vs_full", cosine[i]);
			bench_json_double(&j, "kept_share", kept[i]);
			bench_json_end(&j);
		}
		if (a->codec != KVF_CODEC_NONE) {
			bench_json_begin(&j, "dense_codec");
			bench_json_str(&j, "codec", cname);
			bench_json_u64(&j, "group_tokens", codec_group);
			bench_json_double(&j, "loss", cf.loss);
			bench_json_double(&j, "perplexity", exp(cf.loss));
			bench_json_double(&j, "vs_dense", exp(cf.loss - loss[1]) - 1);
			bench_json_double(&j, "agreement", cf.agreement);
			bench_json_double(&j, "kl_mean", cf.kl_mean);
			bench_json_double(&j, "kl_max", cf.kl_max);
			bench_json_double(&j, "attended_encoded", cf.attended_coded);
			bench_json_double(&j, "tokens_after_a_group", cf.coded_share);
			bench_json_double(&j, "agreement_after_a_group", cf.coded_agreement);
			bench_json_double(&j, "kl_mean_after_a_group", cf.coded_kl_mean);
			bench_json_double(&j, "vs_dense_after_a_group", cf.coded_vs_dense);
			bench_json_end(&j);
		}
		bench_json_end(&j);
		printf("\n");
	} else {
		printf("kvbench attend --model: %s, %u windows of %u tokens of %s/val.bin\n",
		       path, a->windows, r.window, a->model_dir);
		printf("(%u layers, %u q heads, %u kv heads, head_dim %u; store f32, "
		       "%u tokens a page)\n", w.n_layers, w.n_heads, w.n_kv_heads,
		       w.head_dim, r.group_tokens);
		printf("%-24s %10s %10s %10s %12s %8s\n", "attention", "loss",
		       "perplexity", "vs dense", "cos vs full", "kept");
		for (uint32_t i = 0; i < n_modes; i++)
			printf("%-24s %10.4f %10.2f %+9.1f%% %12.4f %7.0f%%\n",
			       model_modes[i].name, loss[i], exp(loss[i]),
			       100 * (exp(loss[i] - loss[1]) - 1), cosine[i],
			       100 * kept[i]);
		printf("(cos vs full: mean cosine of each query head's attention output to\n"
		       " dense attention over the whole window, same query, per layer and\n"
		       " token; kept: H2O's share of the window's tokens left at its end)\n");
		if (a->codec != KVF_CODEC_NONE) {
			printf("dense, codec %-11s %10.4f %10.2f %+9.2f%% (%u tokens a group)\n",
			       cname, cf.loss, exp(cf.loss),
			       100 * (exp(cf.loss - loss[1]) - 1), codec_group);
			printf("codec against dense, token by token: argmax agreement %.2f%%, "
			       "KL mean %.3g, max %.3g nats;\n", 100 * cf.agreement,
			       cf.kl_mean, cf.kl_max);
			if (cf.coded_share > 0)
				printf("  over the %.1f%% of tokens whose context holds a sealed group: "
				       "perplexity %+.2f%%, agreement %.2f%%, KL mean %.3g (%.2f of "
				       "the attended tokens encoded)\n", 100 * cf.coded_share,
				       100 * cf.coded_vs_dense, 100 * cf.coded_agreement,
				       cf.coded_kl_mean, cf.attended_coded);
			else
				printf("  no token's context held a sealed group (%u tokens a group, "
				       "windows of %u): the codec encoded nothing here; a --window "
				       "past the group measures it\n", codec_group, a->window);
		}
	}
	rc = 0;
out:
	if (r.st != NULL)
		kvf_close(r.st);
	if (codec_st != NULL)
		kvf_close(codec_st);
	if (store_dir != NULL && !a->keep)
		bench_remove_store(store_dir);
	if (codec_dir != NULL && !a->keep)
		bench_remove_store(codec_dir);
	kvf_free(r.x);
	kvf_free(r.ref_k);
	kvf_free(r.att_full);
	kvf_free(w.mem);
	free(ids);
	free(path);
	free(val_path);
	free(store_dir);
	free(codec_dir);
	return rc;
}
