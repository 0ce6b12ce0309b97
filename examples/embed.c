/*
 * embed.c - a decode loop on kvflash's public API, the way a llama.cpp-
 * style engine embeds it: a small transformer (random weights, GQA, RoPE)
 * keeps its KV cache in a store; the prompt is prefilled with one
 * kvf_attend_multi per layer (causal over the prompt's positions), then
 * tokens are generated one at a time with kvf_append_tensor + kvf_attend;
 * the store is synced, closed, reopened, and generation goes on.
 *
 * Every attention output, prefill and decode, before and after the
 * reopen, is checked against the same attention computed here in double
 * precision over the example's own in-memory copy of K and V.
 *
 *	embed [DIR]   (default: a new directory under $TMPDIR, removed after)
 *
 * Exit status 0 when everything matched, 1 otherwise, 2 for usage.
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, CLOCK_MONOTONIC: plain C11 too */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <kvflash.h>

enum {
	LAYERS = 4, HQ = 8, HKV = 2, D = 32, DIM = HQ * D, VOCAB = 96,
	PROMPT = 40, STEPS = 48, MAXT = PROMPT + STEPS + 8
};

struct model {
	float emb[VOCAB][DIM];
	float wq[LAYERS][HQ * D][DIM], wk[LAYERS][HKV * D][DIM];
	float wv[LAYERS][HKV * D][DIM], wo[LAYERS][DIM][HQ * D];
	float out[VOCAB][DIM];
};

/* the in-memory reference cache: what the store must hold */
static float ref_k[LAYERS][MAXT][HKV][D], ref_v[LAYERS][MAXT][HKV][D];
static double max_err;

static uint64_t rng = 88172645463325252ull;

static float frand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static void fill(float *w, size_t n, float scale)
{
	for (size_t i = 0; i < n; i++)
		w[i] = frand() * scale;
}

static void matvec(const float *w, const float *x, float *y, int rows, int cols)
{
	for (int r = 0; r < rows; r++) {
		float s = 0;

		for (int c = 0; c < cols; c++)
			s += w[(size_t)r * cols + c] * x[c];
		y[r] = s;
	}
}

/* rope - rotate-half RoPE of n_heads vectors at position pos */
static void rope(float *x, int n_heads, uint64_t pos)
{
	for (int h = 0; h < n_heads; h++)
		for (int i = 0; i < D / 2; i++) {
			double f = (double)pos / pow(10000.0, 2.0 * i / D);
			float *a = &x[h * D + i], *b = &x[h * D + i + D / 2];
			float c = (float)cos(f), s = (float)sin(f), t = *a;

			*a = t * c - *b * s;
			*b = *b * c + t * s;
		}
}

static void normalize(float *x, int n)
{
	double s = 0;

	for (int i = 0; i < n; i++)
		s += (double)x[i] * x[i];
	s = 1.0 / sqrt(s / n + 1e-5);
	for (int i = 0; i < n; i++)
		x[i] = (float)(x[i] * s);
}

/* reference attention of q (HQ x D) at position pos over ref K/V [0, pos] */
static void ref_attend(int l, const float *q, uint64_t pos, float *out)
{
	for (int h = 0; h < HQ; h++) {
		int kh = h / (HQ / HKV);
		double m = -INFINITY, sum = 0, acc[D] = { 0 };
		double *s = malloc((pos + 1) * sizeof(double));

		for (uint64_t t = 0; t <= pos; t++) {
			double dot = 0;

			for (int d = 0; d < D; d++)
				dot += (double)q[h * D + d] * ref_k[l][t][kh][d];
			s[t] = dot / sqrt((double)D);
			if (s[t] > m)
				m = s[t];
		}
		for (uint64_t t = 0; t <= pos; t++) {
			double p = exp(s[t] - m);

			sum += p;
			for (int d = 0; d < D; d++)
				acc[d] += p * ref_v[l][t][kh][d];
		}
		for (int d = 0; d < D; d++)
			out[h * D + d] = (float)(acc[d] / sum);
		free(s);
	}
}

static int check_close(const float *got, const float *want, int n,
		       const char *what, int l, uint64_t pos)
{
	for (int i = 0; i < n; i++) {
		double e = fabs((double)got[i] - want[i]);

		if (e > max_err)
			max_err = e;
		if (e > 1e-4 + 1e-4 * fabs(want[i])) {
			fprintf(stderr, "embed: %s layer %d position %llu element %d: kvflash %g, reference %g\n",
				what, l, (unsigned long long)pos, i, (double)got[i],
				(double)want[i]);
			return 1;
		}
	}
	return 0;
}

static int argmax(const struct model *m, const float *h)
{
	float x[DIM], logits[VOCAB];
	int best = 0;

	memcpy(x, h, sizeof(x));
	normalize(x, DIM);
	matvec(&m->out[0][0], x, logits, VOCAB, DIM);
	for (int i = 1; i < VOCAB; i++)
		if (logits[i] > logits[best])
			best = i;
	return best;
}

#define CALL(c)                                                            \
	do {                                                               \
		kvf_status rc_ = (c);                                      \
		if (rc_ != KVF_OK) {                                       \
			fprintf(stderr, "embed: %s: %s (%s)\n", #c,        \
				kvf_last_error(), kvf_strerror(rc_));      \
			return 1;                                          \
		}                                                          \
	} while (0)

/* kv_view - rows [n][HKV][D] of f32 at data, as a kvf_tensor */
static kvf_tensor kv_view(const void *data, uint64_t n)
{
	kvf_tensor t;

	kvf_tensor_init(&t);
	t.dtype = KVF_DTYPE_F32;
	t.data = data;
	t.n_tokens = n;
	t.n_heads = HKV;
	t.head_dim = D;
	t.data_bytes = n * HKV * D * sizeof(float);
	return t;
}

/* prefill - the prompt through every layer: K/V of all positions appended,
 * then one kvf_attend_multi for all of them; h [PROMPT][DIM] in, out */
static int prefill(kvf_store *st, const struct model *m, const int *prompt,
		   float (*h)[DIM])
{
	static float q[PROMPT][HQ * D], k[PROMPT][HKV * D], v[PROMPT][HKV * D];
	static float att[PROMPT][HQ * D], want[HQ * D], tmp[DIM];
	uint64_t pos[PROMPT];
	kvf_tensor tk, tv;

	for (int t = 0; t < PROMPT; t++) {
		memcpy(h[t], m->emb[prompt[t]], sizeof(h[t]));
		pos[t] = (uint64_t)t;
	}
	for (int l = 0; l < LAYERS; l++) {
		for (int t = 0; t < PROMPT; t++) {
			float x[DIM];

			memcpy(x, h[t], sizeof(x));
			normalize(x, DIM);
			matvec(&m->wq[l][0][0], x, q[t], HQ * D, DIM);
			matvec(&m->wk[l][0][0], x, k[t], HKV * D, DIM);
			matvec(&m->wv[l][0][0], x, v[t], HKV * D, DIM);
			rope(q[t], HQ, pos[t]);
			rope(k[t], HKV, pos[t]);
			memcpy(ref_k[l][t], k[t], sizeof(k[t]));
			memcpy(ref_v[l][t], v[t], sizeof(v[t]));
		}
		tk = kv_view(k, PROMPT);
		tv = kv_view(v, PROMPT);
		CALL(kvf_append_tensor(st, 1, (uint32_t)l, &tk, &tv));
		CALL(kvf_attend_multi(st, 1, (uint32_t)l, PROMPT, pos, &q[0][0],
				      &att[0][0], NULL));
		for (int t = 0; t < PROMPT; t++) {
			ref_attend(l, q[t], pos[t], want);
			if (check_close(att[t], want, HQ * D, "prefill attention", l, pos[t]))
				return 1;
			matvec(&m->wo[l][0][0], att[t], tmp, DIM, HQ * D);
			for (int i = 0; i < DIM; i++)
				h[t][i] += tmp[i];
		}
	}
	return 0;
}

/* decode - one token at position pos: returns the next token in *next */
static int decode(kvf_store *st, const struct model *m, int tok, uint64_t pos,
		  int *next)
{
	float h[DIM], x[DIM], q[HQ * D], k[HKV * D], v[HKV * D];
	float att[HQ * D], want[HQ * D], tmp[DIM];
	kvf_tensor tk, tv;

	memcpy(h, m->emb[tok], sizeof(h));
	for (int l = 0; l < LAYERS; l++) {
		memcpy(x, h, sizeof(x));
		normalize(x, DIM);
		matvec(&m->wq[l][0][0], x, q, HQ * D, DIM);
		matvec(&m->wk[l][0][0], x, k, HKV * D, DIM);
		matvec(&m->wv[l][0][0], x, v, HKV * D, DIM);
		rope(q, HQ, pos);
		rope(k, HKV, pos);
		memcpy(ref_k[l][pos], k, sizeof(k));
		memcpy(ref_v[l][pos], v, sizeof(v));
		tk = kv_view(k, 1);
		tv = kv_view(v, 1);
		CALL(kvf_append_tensor(st, 1, (uint32_t)l, &tk, &tv));
		CALL(kvf_attend(st, 1, (uint32_t)l, q, att, NULL));
		ref_attend(l, q, pos, want);
		if (check_close(att, want, HQ * D, "decode attention", l, pos))
			return 1;
		matvec(&m->wo[l][0][0], att, tmp, DIM, HQ * D);
		for (int i = 0; i < DIM; i++)
			h[i] += tmp[i];
	}
	*next = argmax(m, h);
	return 0;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	static struct model m;
	static float h[PROMPT][DIM];
	kvf_model shape = { LAYERS, HQ, HKV, D, KVF_DTYPE_F32 };
	char tmpl[4096], *dir;
	int prompt[PROMPT], tok, generated = 0, rc = 1;
	kvf_options o;
	kvf_store *st = NULL;
	uint64_t pos, len = 0;
	double t0, dt;

	if (argc > 2 || (argc == 2 && argv[1][0] == '-')) {
		fprintf(stderr, "usage: %s [DIR]\n", argv[0]);
		return 2;
	}
	snprintf(tmpl, sizeof(tmpl), "%s/kvflash-embed.XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	dir = argc == 2 ? argv[1] : mkdtemp(tmpl);
	if (dir == NULL) {
		perror("embed: mkdtemp");
		return 1;
	}
	fill(&m.emb[0][0], sizeof(m.emb) / sizeof(float), 1.0f);
	fill(&m.wq[0][0][0], sizeof(m.wq) / sizeof(float), 1.0f / sqrtf(DIM));
	fill(&m.wk[0][0][0], sizeof(m.wk) / sizeof(float), 1.0f / sqrtf(DIM));
	fill(&m.wv[0][0][0], sizeof(m.wv) / sizeof(float), 1.0f / sqrtf(DIM));
	fill(&m.wo[0][0][0], sizeof(m.wo) / sizeof(float), 1.0f / sqrtf(HQ * D));
	fill(&m.out[0][0], sizeof(m.out) / sizeof(float), 1.0f / sqrtf(DIM));
	for (int t = 0; t < PROMPT; t++)
		prompt[t] = (int)((frand() + 1.0f) * 0.5f * (VOCAB - 1));

	kvf_options_init(&o, &shape);
	o.capacity_bytes = 64ull << 20;
	CALL(kvf_open(dir, &o, &st));
	CALL(kvf_seq_create(st, 1));
	t0 = now_s();
	if (prefill(st, &m, prompt, h) != 0)
		goto out;
	tok = argmax(&m, h[PROMPT - 1]);
	pos = PROMPT;
	for (int s = 0; s < STEPS; s++, pos++, generated++) {
		if (s == STEPS / 2) {
			/* the engine restarts: everything synced survives */
			CALL(kvf_sync(st));
			CALL(kvf_close(st));
			st = NULL;
			CALL(kvf_open(dir, NULL, &st));
			CALL(kvf_seq_len(st, 1, LAYERS - 1, &len));
			if (len != pos) {
				fprintf(stderr, "embed: reopened with %llu tokens, expected %llu\n",
					(unsigned long long)len, (unsigned long long)pos);
				goto out;
			}
		}
		if (decode(st, &m, tok, pos, &tok) != 0)
			goto out;
	}
	dt = now_s() - t0;
	printf("embed: prefilled %d tokens, generated %d (closed and reopened after %d), %d layers x %d query / %d KV heads of %d; every attention output within %.2g of the double-precision reference; %.0f tokens/s\n",
	       PROMPT, generated, STEPS / 2, LAYERS, HQ, HKV, D, max_err,
	       (PROMPT + generated) / dt);
	rc = 0;
out:
	if (st != NULL && kvf_close(st) != KVF_OK && rc == 0) {
		fprintf(stderr, "embed: kvf_close: %s\n", kvf_last_error());
		rc = 1;
	}
	if (argc < 2) {
		char cmd[4200];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		if (system(cmd) != 0)
			fprintf(stderr, "embed: could not remove %s\n", dir);
	}
	return rc;
}
