/*
 * crash_model.c - the model, checks and child plumbing of the crash and
 * power-cut tests (see crash_model.h).
 */
#include "crash_model.h"

#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "compute/half.h"
#include "engine/base/store_header.h"
#include "testutil.h"

/* ---- failing from either process ---------------------------------------- */

int in_child; /* set in forked children: report through the pipe */
int report_fd = -1;

/* fail - stop the test: in a child, send the message and exit 3 */
void fail(const char *fmt, ...)
{
	char msg[900];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (in_child) {
		char line[1024];
		int n = snprintf(line, sizeof(line), "E %s\n", msg);

		if (write(report_fd, line, (size_t)n) < 0)
			_exit(4);
		_exit(3);
	}
	cr_fatal("%s", msg);
}

/* ---- values and the reference (see test_store_model.c) ------------------ */

uint64_t mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void fill_row(unsigned char *dst, uint64_t tag, uint32_t layer, int kind,
		     uint64_t t, uint32_t h)
{
	uint64_t x = mix(mix(mix(tag) + layer * 0x100000001b3ull +
			     (uint64_t)kind * 0x3c6ef372fe94f82bull +
			     h * 0x2545f4914f6cdd1dull) +
			 t);

	for (uint32_t j = 0; j < ROW; j += 8) {
		uint64_t w = mix(x + j);

		memcpy(dst + j, &w, 8);
	}
	/* a codec takes finite values: each element uniform in (-2, 2) */
	for (uint32_t j = 0; crash_codec != KVF_CODEC_NONE && j < ROW; j += 2) {
		uint16_t e;

		memcpy(&e, dst + j, 2);
		e = kvf_f32_to_f16((float)e / 16384.0f - 2.0f);
		memcpy(dst + j, &e, 2);
	}
}

uint64_t seq_id(uint32_t i)
{
	return i < 4 ? 10 + i : (1ull << 40) + i;
}

void track_push(struct track *t, uint64_t n, uint64_t tag)
{
	if (n == 0)
		return;
	t->runs = realloc(t->runs, (t->n + 1) * sizeof(*t->runs));
	if (t->runs == NULL)
		fail("out of memory");
	t->len += n;
	t->runs[t->n++] = (struct run){ t->len, tag };
}

void track_prefix(struct track *dst, const struct track *src, uint64_t n)
{
	uint32_t cuts = src->cuts + (n < src->len);
	uint64_t at = 0;

	free(dst->runs);
	memset(dst, 0, sizeof(*dst));
	dst->cuts = cuts;
	for (uint32_t i = 0; i < src->n && at < n; i++) {
		uint64_t end = src->runs[i].end < n ? src->runs[i].end : n;

		track_push(dst, end - at, src->runs[i].tag);
		at = end;
	}
}

uint64_t track_tag(const struct track *t, uint64_t tok)
{
	for (uint32_t i = 0; i < t->n; i++)
		if (t->runs[i].end > tok)
			return t->runs[i].tag;
	fail("token %" PRIu64 " past the reference", tok);
	return 0;
}

void mseq_clear(struct mseq *s)
{
	for (uint32_t l = 0; l < LAYERS; l++) {
		free(s->kv[l].runs);
		free(s->x[l].runs);
	}
	memset(s, 0, sizeof(*s));
}

void model_copy(struct model *dst, const struct model *src)
{
	for (uint32_t i = 0; i < ID_POOL; i++) {
		mseq_clear(&dst->seqs[i]);
		dst->seqs[i].live = src->seqs[i].live;
		for (uint32_t l = 0; l < LAYERS; l++) {
			track_prefix(&dst->seqs[i].kv[l], &src->seqs[i].kv[l],
				     src->seqs[i].kv[l].len);
			track_prefix(&dst->seqs[i].x[l], &src->seqs[i].x[l],
				     src->seqs[i].x[l].len);
		}
	}
	dst->next_tag = src->next_tag;
	dst->optim_steps = src->optim_steps;
}

void model_free(struct model *m)
{
	for (uint32_t i = 0; i < ID_POOL; i++)
		mseq_clear(&m->seqs[i]);
}

/*
 * The optimizer: SGD with lr 1 and momentum 1 over small integer
 * gradients, so that every value is an integer a float holds exactly and
 * the reference needs no tolerance: buf_k = g_1 + ... + g_k and
 * p_k = p_0 - (buf_1 + ... + buf_k).
 */

float optim_grad(uint64_t step, uint32_t i)
{
	return (float)((int)(mix(step * 0x9e3779b97f4a7c15ull + i) % 7) - 3);
}

float optim_param(uint64_t steps, uint32_t i)
{
	double buf = 0, p = (double)(i % 101);

	for (uint64_t s = 1; s <= steps; s++) {
		buf += optim_grad(s, i);
		p -= buf;
	}
	return (float)p;
}

/* ---- the store's side ---------------------------------------------------- */

kvf_media_kind crash_media = KVF_MEDIA_FILE; /* set per test */
kvf_codec crash_codec = KVF_CODEC_NONE;
uint32_t crash_g = G;

void crash_codec_set(kvf_codec c)
{
	static const char *const names[] = { "fp8", "int8", "int4" };
	const char *env = getenv("KVF_CRASH_CODEC");

	for (uint32_t i = 0; c == KVF_CODEC_NONE && env && i < 3; i++)
		if (strcmp(env, names[i]) == 0)
			c = (kvf_codec)(KVF_CODEC_FP8 + i);
	crash_codec = c;
	crash_g = c == KVF_CODEC_NONE
			  ? G
			  : store_codec_group(4096, c, DIM,
					      store_codec_layout_for(4096, c, DIM))
				    .tokens;
	if (crash_g == 0)
		fail("no token group for codec %s", kvf_codec_name(c));
}

kvf_options crash_opts(void)
{
	kvf_model m = { LAYERS, QH, KVH, DIM, KVF_DTYPE_F16 };
	kvf_options o;

	kvf_options_init(&o, &m);
	o.media = crash_media;
	o.segment_size = 64 * 1024;
	o.capacity_bytes = 2ull * 64 * 64 * 1024;
	o.n_stripes = 2;
	o.n_threads = 1;
	o.codec = crash_codec;
	return o;
}

unsigned char *buf_a, *buf_b, *buf_c;

void bufs_alloc(void)
{
	size_t cap = (size_t)(MAX_TOKENS + 16 * G) * QH * ROW;

	if (buf_a != NULL) /* a test that runs several rounds' series */
		return;
	buf_a = malloc(cap);
	buf_b = malloc(cap);
	buf_c = malloc(cap);
	if (!buf_a || !buf_b || !buf_c)
		fail("out of memory");
}

/* rows_close - ROW when a K or V row of a codec store reads back within
 * the codec's error of the values appended (in (-2, 2)).  One encoding
 * is within half a step of its grid (INT8 2/127, INT4 4/15, FP8 1/16
 * relative); the rounds truncate into sealed groups often, and each time
 * the kept tokens are encoded again when the group refills, so the bound
 * is some eight encodings' worth: INT8 0.25, INT4 1.0, FP8 50 % + 0.05.
 * FP8's relative bound grows by one encoding's 1/16 for each cut the
 * track has seen (`cuts`, more than the tokens of one group can have
 * had), up to 90 %: a token kept through many cuts may pass eight
 * encodings, and one did.  A row of other values (another token's, a
 * zero page) is still far outside: each of its 64 elements is within the
 * bound with odds under one half (a zero element only where |y| <= 0.5).
 * Else the byte of the first element that is not, and its error in
 * *off. */
static uint32_t rows_close(const unsigned char *got,
			   const unsigned char *want, uint32_t cuts, float *off)
{
	float fp8 = 0.5f + (float)cuts / 16.0f;

	if (fp8 > 0.9f)
		fp8 = 0.9f;
	for (uint32_t j = 0; j < ROW; j += 2) {
		uint16_t a, b;
		float x, y, tol;

		memcpy(&a, got + j, 2);
		memcpy(&b, want + j, 2);
		x = kvf_f16_to_f32(a);
		y = kvf_f16_to_f32(b);
		tol = crash_codec == KVF_CODEC_INT8 ? 0.25f
		      : crash_codec == KVF_CODEC_INT4 ? 1.0f
						      : fp8 * fabsf(y) + 0.05f;
		if (!(fabsf(x - y) <= tol)) {
			*off = x - y;
			return j;
		}
	}
	return ROW;
}

/* check_rows - n rows at stride in got are tokens [t0, t0+n) of (t,h) */
int check_rows(const struct track *t, uint32_t layer, int kind,
		      uint32_t h, uint64_t t0, uint64_t n,
		      const unsigned char *got, size_t stride, char *why,
		      size_t why_cap)
{
	unsigned char want[ROW];

	for (uint64_t i = 0; i < n; i++) {
		fill_row(want, track_tag(t, t0 + i), layer, kind, t0 + i, h);
		if (crash_codec != KVF_CODEC_NONE && kind != 2) {
			float off;
			uint32_t j = rows_close(got + i * stride, want, t->cuts,
						&off);

			if (j == ROW)
				continue;
			snprintf(why, why_cap,
				 "layer %u kind %d head %u token %" PRIu64
				 " reads back wrong (dim %u off by %g, more than %s allows)",
				 layer, kind, h, t0 + i, j / 2, (double)off,
				 kvf_codec_name(crash_codec));
			return 1;
		}
		if (memcmp(got + i * stride, want, ROW) != 0) {
			uint16_t a, b;
			uint32_t j = 0;

			while (j + 2 < ROW &&
			       memcmp(got + i * stride + j, want + j, 2) == 0)
				j += 2;
			memcpy(&a, got + i * stride + j, 2);
			memcpy(&b, want + j, 2);
			snprintf(why, why_cap,
				 "layer %u kind %d head %u token %" PRIu64
				 " reads back wrong (bytes %u: %04x, not %04x)",
				 layer, kind, h, t0 + i, j, a, b);
			return 1;
		}
	}
	return 0;
}

/*
 * state_differs - compare the store with m: every sequence of the id pool
 * exists or not as m says, every length, and every token.  0 if equal,
 * else 1 with the first difference in why.
 */
int state_differs(kvf_store *st, const struct model *m, char *why,
			 size_t why_cap)
{
	kvf_stats stats = { .struct_size = sizeof(stats) };
	uint32_t live = 0, has_ballast;
	uint64_t len;

	has_ballast = kvf_seq_len(st, BALLAST, 0, &len) == KVF_OK;

	for (uint32_t i = 0; i < ID_POOL; i++) {
		const struct mseq *s = &m->seqs[i];
		uint64_t id = seq_id(i), n;
		kvf_status rc = kvf_seq_len(st, id, 0, &n);

		if (!s->live) {
			if (rc != KVF_ENOENT) {
				snprintf(why, why_cap,
					 "sequence %" PRIu64 " exists (%d)", id,
					 rc);
				return 1;
			}
			continue;
		}
		live++;
		for (uint32_t l = 0; l < LAYERS; l++) {
			uint64_t xl = s->x[l].len;

			rc = kvf_seq_len(st, id, l, &n);
			if (rc != KVF_OK || n != s->kv[l].len) {
				snprintf(why, why_cap,
					 "sequence %" PRIu64
					 " layer %u: %d, %" PRIu64
					 " tokens, expected %" PRIu64,
					 id, l, rc, rc ? 0 : n, s->kv[l].len);
				return 1;
			}
			for (uint32_t h = 0; h < KVH; h++) {
				rc = kvf_read(st, id, l, h, 0, n, buf_a, buf_b);
				if (rc != KVF_OK) {
					snprintf(why, why_cap,
						 "sequence %" PRIu64
						 " layer %u head %u: %s",
						 id, l, h, kvf_last_error());
					return 1;
				}
				if (check_rows(&s->kv[l], l, 0, h, 0, n, buf_a,
					       ROW, why, why_cap) ||
				    check_rows(&s->kv[l], l, 1, h, 0, n, buf_b,
					       ROW, why, why_cap))
					return 1;
			}
			rc = kvf_read_x(st, id, l, 0, xl, buf_c);
			if (rc != KVF_OK || kvf_read_x(st, id, l, xl, xl + 1,
						       buf_c) != KVF_ERANGE) {
				snprintf(why, why_cap,
					 "sequence %" PRIu64
					 " layer %u: X is not %" PRIu64
					 " tokens (%s)",
					 id, l, xl, kvf_last_error());
				return 1;
			}
			rc = kvf_read_x(st, id, l, 0, xl, buf_c);
			for (uint32_t q = 0; q < QH && rc == KVF_OK; q++)
				if (check_rows(&s->x[l], l, 2, q, 0, xl,
					       buf_c + (size_t)q * ROW,
					       (size_t)QH * ROW, why, why_cap))
					return 1;
		}
	}
	if (kvf_stats_get(st, &stats) != KVF_OK ||
	    stats.n_sequences != live + has_ballast) {
		snprintf(why, why_cap, "n_sequences %" PRIu64 ", expected %u",
			 stats.n_sequences, live + has_ballast);
		return 1;
	}
	return 0;
}

void announce(char what, unsigned op_no)
{
	char line[32];
	int n = snprintf(line, sizeof(line), "%c %u\n", what, op_no);

	if (write(report_fd, line, (size_t)n) != n)
		_exit(4);
}

kvf_store *must_store;

void must(kvf_status rc, const char *what, unsigned op_no)
{
	kvf_stats s = { .struct_size = sizeof(s) };
	char msg[600];

	if (rc == KVF_OK)
		return;
	snprintf(msg, sizeof(msg), "%s", kvf_last_error());
	if (rc == KVF_ENOSPC && must_store != NULL &&
	    kvf_stats_get(must_store, &s) == KVF_OK)
		fail("writer op %u: %s: %s [%" PRIu64
		     " live pages; segments %u free, %u open, %u sealed, %u dying]",
		     op_no, what, msg, s.live_pages, s.segments_free,
		     s.segments_open, s.segments_sealed, s.segments_dying);
	fail("writer op %u: %s: %s", op_no, what, msg);
}

/* ---- children ------------------------------------------------------------ */

/* spawn - fork a child running fn; its reports come back on *fd */
pid_t spawn(int *fd)
{
	pid_t pid = fx_spawn(fd);

	if (pid == 0) {
		in_child = 1;
		report_fd = fx_child_fd();
	}
	return pid;
}

/* run_child - run fn(path, arg) in a child, which must exit 0; its
 * failure fails the test with its message.  The parent never opens a
 * store itself (see the top of this file). */
void run_child(void (*fn)(const char *path, uint64_t arg),
		     const char *path, uint64_t arg)
{
	int fd, status, ok;
	pid_t pid = spawn(&fd);
	char *text;

	if (pid == 0) {
		fn(path, arg);
		_exit(0);
	}
	text = fx_collect(fd);
	cr_assert(eq(int, waitpid(pid, &status, 0), pid));
	if (strncmp(text, "E ", 2) == 0)
		fail("child: %s", text + 2);
	ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
	cr_assert(ok, "child died (status %d): %s", status, text);
	free(text);
}

/* trials - $name if set (a long run: tests/crash/crash-loop.sh), else def */
unsigned trials(const char *name, unsigned def)
{
	const char *v = getenv(name);

	return v && atoi(v) > 0 ? (unsigned)atoi(v) : def;
}
