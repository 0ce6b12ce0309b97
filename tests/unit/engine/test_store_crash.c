/*
 * test_store_crash.c - crash tests: a writer process killed at seeded
 * points, and a store whose catalog commit fails.
 *
 * Kill tests.  Each round forks a writer child that opens the store and
 * runs a seeded script (append, append_x, sync, read-back checks,
 * create/fork/free, and steps of an optimizer kept in the store) against a
 * copy of the reference it inherited, in a store small enough that the
 * cleaner runs.  Around every kvf_sync it tells the parent through a pipe:
 * "sync N begins", "sync N done" (and "step N begins", "step N done"
 * around optimizer steps, each durable on return).  The child is SIGKILLed at a seeded moment: by the
 * parent after a seeded delay, or by itself before a seeded operation.
 * The parent then replays the same script on its own reference (the
 * script depends only on the seed and the reference) to get the state of
 * the last sync it was told about, and forks a checker child that reopens
 * the store and compares every sequence, length and token with it.
 *
 * A sync may have completed right before the kill without the parent
 * hearing "done": when a "begins" has no "done", the state of that sync
 * is accepted too (and only those two).  Nothing else is: no sequence,
 * token or X row past the accepted state may be visible.
 *
 * The parent never opens a store itself (the checker does), so no RocksDB
 * thread exists in the process that forks.
 *
 * Power cuts (store_power).  The same rounds, but the writer journals its
 * writes (powercut.h) and, once it is dead, the parent cuts the power
 * under the store: pages written since their file's last fdatasync keep
 * their old bytes, their new ones or a torn mix, and the catalog's logs
 * lose a random part of what was never synced.  The checker then holds the
 * store to the same two states.
 *
 * KVF_CRASH_TRIALS and KVF_POWER_TRIALS set the rounds of a long run
 * (tests/crash/crash-loop.sh).
 *
 * Known engine bug (reported): kvf_seq_create, kvf_seq_fork and
 * kvf_seq_free commit to the catalog at once, so a kill before the next
 * sync leaves them visible (and a forked child's partial tail group is
 * then missing).  The script therefore runs those calls only right after
 * a sync, each followed by its own sync inside one "begins"/"done" pair,
 * and forks only at group boundaries.  KVF_CRASH_META_ANYWHERE=1 lifts
 * that, to reproduce the bug.
 *
 * Fatal test.  catalog_fail_commits (engine/catalog.h, reached through
 * engine/store.h) makes the next catalog commit fail inside each call that
 * commits; afterwards every call on the handle answers KVF_EFATAL until it
 * is closed, and the reopened store holds the last sync's state.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine/catalog.h"
#include "engine/store.h"
#include "kvflash.h"
#include "powercut.h"
#include "testutil.h"

#define LAYERS 2
#define QH 4
#define KVH 2
#define DIM 64 /* f16: 128 bytes a token of a head, G = 32 */
#define ROW (DIM * 2)
#define G 32
#define ID_POOL 6
#define BALLAST (1ull << 50) /* a sequence outside the pool; see below */
#define MAX_TOKENS (24 * G)  /* no appends to a layer past this */

#define SEEDS 20          /* stores per run of killed_writer */
#define ROUNDS 6          /* kills per seed, on the same store */
#define OPS_PER_ROUND 300 /* script length of one writer */

/* ---- failing from either process ---------------------------------------- */

static int in_child; /* set in forked children: report through the pipe */
static int report_fd = -1;

/* fail - stop the test: in a child, send the message and exit 3 */
static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void fail(const char *fmt, ...)
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

static uint64_t mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void fill_row(unsigned char *dst, uint64_t tag, uint32_t layer, int kind,
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
}

struct run {
	uint64_t end; /* tokens below end carry tag */
	uint64_t tag;
};

struct track {
	uint64_t len; /* tokens */
	uint32_t n;   /* runs */
	struct run *runs;
};

struct mseq {
	int live;
	struct track kv[LAYERS];
	struct track x[LAYERS];
};

struct model {
	struct mseq seqs[ID_POOL];
	uint64_t next_tag;
	uint64_t opt_steps; /* optimizer steps taken */
};

static uint64_t seq_id(uint32_t i)
{
	return i < 4 ? 10 + i : (1ull << 40) + i;
}

static void track_push(struct track *t, uint64_t n, uint64_t tag)
{
	if (n == 0)
		return;
	t->runs = realloc(t->runs, (t->n + 1) * sizeof(*t->runs));
	if (t->runs == NULL)
		fail("out of memory");
	t->len += n;
	t->runs[t->n++] = (struct run){ t->len, tag };
}

static void track_prefix(struct track *dst, const struct track *src, uint64_t n)
{
	uint64_t at = 0;

	free(dst->runs);
	memset(dst, 0, sizeof(*dst));
	for (uint32_t i = 0; i < src->n && at < n; i++) {
		uint64_t end = src->runs[i].end < n ? src->runs[i].end : n;

		track_push(dst, end - at, src->runs[i].tag);
		at = end;
	}
}

static uint64_t track_tag(const struct track *t, uint64_t tok)
{
	for (uint32_t i = 0; i < t->n; i++)
		if (t->runs[i].end > tok)
			return t->runs[i].tag;
	fail("token %" PRIu64 " past the reference", tok);
	return 0;
}

static void mseq_clear(struct mseq *s)
{
	for (uint32_t l = 0; l < LAYERS; l++) {
		free(s->kv[l].runs);
		free(s->x[l].runs);
	}
	memset(s, 0, sizeof(*s));
}

static void model_copy(struct model *dst, const struct model *src)
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
	dst->opt_steps = src->opt_steps;
}

static void model_free(struct model *m)
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
#define OPT_NAME "crash-opt"
#define OPT_PARAMS 3000 /* three pages of fp32 per state tensor */

static float opt_grad(uint64_t step, uint32_t i)
{
	return (float)((int)(mix(step * 0x9e3779b97f4a7c15ull + i) % 7) - 3);
}

static float opt_param(uint64_t steps, uint32_t i)
{
	double buf = 0, p = (double)(i % 101);

	for (uint64_t s = 1; s <= steps; s++) {
		buf += opt_grad(s, i);
		p -= buf;
	}
	return (float)p;
}

/* ---- the store's side ---------------------------------------------------- */

static kvf_media_kind crash_media = KVF_MEDIA_FILE; /* set per test */

static kvf_options crash_opts(void)
{
	kvf_model m = { LAYERS, QH, KVH, DIM, KVF_DTYPE_F16 };
	kvf_options o;

	kvf_options_init(&o, &m);
	o.media = crash_media;
	o.segment_size = 64 * 1024;
	o.capacity_bytes = 2ull * 64 * 64 * 1024;
	o.n_stripes = 2;
	o.n_threads = 1;
	return o;
}

static unsigned char *buf_a, *buf_b, *buf_c;

static void bufs_alloc(void)
{
	size_t cap = (size_t)(MAX_TOKENS + 16 * G) * QH * ROW;

	buf_a = malloc(cap);
	buf_b = malloc(cap);
	buf_c = malloc(cap);
	if (!buf_a || !buf_b || !buf_c)
		fail("out of memory");
}

/* check_rows - n rows at stride in got are tokens [t0, t0+n) of (t,h) */
static int check_rows(const struct track *t, uint32_t layer, int kind,
		      uint32_t h, uint64_t t0, uint64_t n,
		      const unsigned char *got, size_t stride, char *why,
		      size_t why_cap)
{
	unsigned char want[ROW];

	for (uint64_t i = 0; i < n; i++) {
		fill_row(want, track_tag(t, t0 + i), layer, kind, t0 + i, h);
		if (memcmp(got + i * stride, want, ROW) != 0) {
			snprintf(why, why_cap,
				 "layer %u kind %d head %u token %" PRIu64
				 " reads back wrong",
				 layer, kind, h, t0 + i);
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
static int state_differs(kvf_store *st, const struct model *m, char *why,
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

/* ---- the script --------------------------------------------------------- */

enum op_kind {
	OP_APPEND,
	OP_APPEND_X,
	OP_SYNC,
	OP_META,
	OP_READ,
	OP_OPT_STEP
};

struct script {
	uint64_t rng;      /* state */
	int after_sync;    /* the last operation was a sync (or the start) */
	int meta_anywhere; /* KVF_CRASH_META_ANYWHERE */
};

/* One decided operation: what step() will do, enough to replay it. */
struct op {
	enum op_kind kind;
	uint32_t seq, layer, n, child; /* pool indexes, layer, tokens */
	int meta;                      /* 0 create, 1 fork, 2 free */
	uint64_t tag, fork_at;
};

static int pick_live(struct script *sc, const struct model *m, uint32_t *out)
{
	uint32_t start = (uint32_t)rng_below(&sc->rng, ID_POOL);

	for (uint32_t i = 0; i < ID_POOL; i++)
		if (m->seqs[(start + i) % ID_POOL].live) {
			*out = (start + i) % ID_POOL;
			return 1;
		}
	return 0;
}

static uint32_t pick_n(struct script *sc)
{
	switch (rng_below(&sc->rng, 7)) {
	case 0:
		return 1;
	case 1:
		return G - 1;
	case 2:
		return G;
	case 3:
		return G + 1;
	case 4:
		return (uint32_t)(4 * G + rng_below(&sc->rng, 4 * G));
	default:
		return (uint32_t)(1 + rng_below(&sc->rng, 3 * G));
	}
}

/* decide - the next operation of the script, from its rng and the model */
static struct op decide(struct script *sc, struct model *m)
{
	struct op op = { 0 };
	uint64_t r = rng_below(&sc->rng, 100);
	uint32_t s;

	if (!pick_live(sc, m, &s) || (r >= 75 && r < 85)) {
		/* create, fork or free */
		if (!sc->after_sync && !sc->meta_anywhere) {
			op.kind = OP_SYNC;
			return op;
		}
		op.kind = OP_META;
		op.child = (uint32_t)rng_below(&sc->rng, ID_POOL);
		if (!pick_live(sc, m, &s) ||
		    (!m->seqs[op.child].live && rng_below(&sc->rng, 2))) {
			uint32_t i;

			for (i = 0; i < ID_POOL && m->seqs[op.child].live; i++)
				op.child = (op.child + 1) % ID_POOL;
			op.meta = m->seqs[op.child].live ? 2 : 0;
		} else if (!m->seqs[op.child].live) {
			uint64_t most = UINT64_MAX;

			op.meta = 1;
			op.seq = s;
			for (uint32_t l = 0; l < LAYERS; l++)
				if (m->seqs[s].kv[l].len < most)
					most = m->seqs[s].kv[l].len;
			op.fork_at = rng_below(&sc->rng, most + 1);
			if (!sc->meta_anywhere)
				op.fork_at -= op.fork_at % G;
		} else {
			op.meta = 2;
		}
		return op;
	}
	op.seq = s;
	op.layer = (uint32_t)rng_below(&sc->rng, LAYERS);
	if (r < 50) {
		op.kind = OP_APPEND;
		op.n = pick_n(sc);
		if (m->seqs[s].kv[op.layer].len + op.n > MAX_TOKENS)
			op.n = 0;
	} else if (r < 58) {
		op.kind = OP_APPEND_X;
		op.n = pick_n(sc);
		if (m->seqs[s].x[op.layer].len + op.n > MAX_TOKENS)
			op.n = 0;
	} else if (r < 75) {
		op.kind = OP_SYNC;
	} else if (r < 90) {
		op.kind = OP_OPT_STEP;
	} else {
		op.kind = OP_READ;
	}
	op.tag = ++m->next_tag;
	return op;
}

/* apply - what op does to the reference */
static void apply(struct script *sc, struct model *m, const struct op *op)
{
	struct mseq *s = &m->seqs[op->seq];

	sc->after_sync = op->kind == OP_SYNC ||
			 (op->kind == OP_META && !sc->meta_anywhere);
	switch (op->kind) {
	case OP_APPEND:
		track_push(&s->kv[op->layer], op->n, op->tag);
		break;
	case OP_APPEND_X:
		track_push(&s->x[op->layer], op->n, op->tag);
		break;
	case OP_OPT_STEP:
		m->opt_steps++;
		break;
	case OP_META: {
		struct mseq *c = &m->seqs[op->child];

		if (op->meta == 0) {
			mseq_clear(c);
			c->live = 1;
		} else if (op->meta == 1) {
			mseq_clear(c);
			c->live = 1;
			for (uint32_t l = 0; l < LAYERS; l++) {
				uint64_t xn = s->x[l].len < op->fork_at ?
						      s->x[l].len :
						      op->fork_at;

				track_prefix(&c->kv[l], &s->kv[l], op->fork_at);
				track_prefix(&c->x[l], &s->x[l], xn);
			}
		} else {
			mseq_clear(c);
		}
		break;
	}
	default:
		break;
	}
}

/* ---- the writer child --------------------------------------------------- */

static void announce(char what, unsigned op_no)
{
	char line[32];
	int n = snprintf(line, sizeof(line), "%c %u\n", what, op_no);

	if (write(report_fd, line, (size_t)n) != n)
		_exit(4);
}

static void must(kvf_status rc, const char *what, unsigned op_no)
{
	if (rc != KVF_OK)
		fail("writer op %u: %s: %s", op_no, what, kvf_last_error());
}

static void do_sync(kvf_store *st, unsigned op_no)
{
	kvf_stats stats = { .struct_size = sizeof(stats) };

	announce('B', op_no);
	must(kvf_sync(st), "kvf_sync", op_no);
	announce('D', op_no);
	/* "C n": the cleaner has emptied n segments since open */
	must(kvf_stats_get(st, &stats), "kvf_stats_get", op_no);
	announce('C', (unsigned)stats.segments_cleaned);
}

static kvf_opt *writer_opt; /* the writer's handle to OPT_NAME */

/* opt_step - step writer_opt to step n; "P n" before, "Q n" once durable */
static void opt_step(uint64_t n, unsigned op_no)
{
	static float g[OPT_PARAMS];
	kvf_grad grad = { .dtype = KVF_DTYPE_F32, .values = g,
			  .n = OPT_PARAMS };

	for (uint32_t i = 0; i < OPT_PARAMS; i++)
		g[i] = opt_grad(n, i);
	announce('P', (unsigned)n);
	must(kvf_opt_step(writer_opt, &grad, NULL), "kvf_opt_step", op_no);
	announce('Q', (unsigned)n);
}

/* run_op - perform op on the store (the reference m is before op) */
static void run_op(kvf_store *st, const struct model *m, const struct op *op,
		   unsigned op_no, uint64_t *rng)
{
	const struct mseq *s = &m->seqs[op->seq];
	uint64_t id = seq_id(op->seq);
	char why[256];

	switch (op->kind) {
	case OP_APPEND: {
		uint64_t t0 = s->kv[op->layer].len;

		for (uint32_t i = 0; i < op->n; i++)
			for (uint32_t h = 0; h < KVH; h++) {
				size_t off = ((size_t)i * KVH + h) * ROW;

				fill_row(buf_a + off, op->tag, op->layer, 0,
					 t0 + i, h);
				fill_row(buf_b + off, op->tag, op->layer, 1,
					 t0 + i, h);
			}
		must(kvf_append(st, id, op->layer, op->n, buf_a, buf_b),
		     "kvf_append", op_no);
		break;
	}
	case OP_APPEND_X: {
		uint64_t t0 = s->x[op->layer].len;

		for (uint32_t i = 0; i < op->n; i++)
			for (uint32_t q = 0; q < QH; q++)
				fill_row(buf_a + ((size_t)i * QH + q) * ROW,
					 op->tag, op->layer, 2, t0 + i, q);
		must(kvf_append_x(st, id, op->layer, op->n, buf_a),
		     "kvf_append_x", op_no);
		break;
	}
	case OP_SYNC:
		do_sync(st, op_no);
		break;
	case OP_OPT_STEP:
		opt_step(m->opt_steps + 1, op_no);
		break;
	case OP_META: {
		uint64_t child = seq_id(op->child);

		/* with the workaround: "begins" covers the call and its sync */
		if (!getenv("KVF_CRASH_META_ANYWHERE"))
			announce('B', op_no);
		if (op->meta == 0)
			must(kvf_seq_create(st, child), "kvf_seq_create",
			     op_no);
		else if (op->meta == 1)
			must(kvf_seq_fork(st, id, child, op->fork_at),
			     "kvf_seq_fork", op_no);
		else
			must(kvf_seq_free(st, child), "kvf_seq_free", op_no);
		if (!getenv("KVF_CRASH_META_ANYWHERE")) {
			must(kvf_sync(st), "kvf_sync", op_no);
			announce('D', op_no);
		}
		break;
	}
	case OP_READ: {
		uint64_t len = s->kv[op->layer].len;
		uint64_t t0 = rng_below(rng, len + 1);
		uint64_t t1 = t0 + rng_below(rng, len - t0 + 1);
		uint32_t h = (uint32_t)rng_below(rng, KVH);

		must(kvf_read(st, id, op->layer, h, t0, t1, buf_a, buf_b),
		     "kvf_read", op_no);
		if (check_rows(&s->kv[op->layer], op->layer, 0, h, t0, t1 - t0,
			       buf_a, ROW, why, sizeof(why)) ||
		    check_rows(&s->kv[op->layer], op->layer, 1, h, t0, t1 - t0,
			       buf_b, ROW, why, sizeof(why)))
			fail("writer op %u: %s", op_no, why);
		break;
	}
	}
}

/* writer - the child: open, run the round's script, maybe kill itself */
static void writer(const char *path, struct model *m, uint64_t round_seed,
		   unsigned self_kill_at, const char *journal)
{
	struct script sc = { .rng = round_seed, .after_sync = 1 };
	uint64_t read_rng = mix(round_seed);
	kvf_options o = crash_opts();
	kvf_store *st = NULL;

	sc.meta_anywhere = getenv("KVF_CRASH_META_ANYWHERE") != NULL;
	if (journal && powercut_arm(journal, path) != 0)
		fail("powercut_arm %s: %s", journal, strerror(errno));
	must(kvf_open(path, &o, &st), "kvf_open", 0);
	must(kvf_opt_open(st, OPT_NAME, &writer_opt), "kvf_opt_open", 0);
	for (unsigned i = 1; i <= OPS_PER_ROUND; i++) {
		struct op op = decide(&sc, m);

		if (i == self_kill_at)
			raise(SIGKILL);
		run_op(st, m, &op, i, &read_rng);
		apply(&sc, m, &op);
	}
	announce('B', OPS_PER_ROUND + 1);
	must(kvf_opt_close(writer_opt), "kvf_opt_close", OPS_PER_ROUND + 1);
	must(kvf_close(st), "kvf_close", OPS_PER_ROUND + 1);
	announce('D', OPS_PER_ROUND + 1);
	_exit(0);
}

/* ---- the parent ---------------------------------------------------------- */

/* spawn - fork a child running fn; its reports come back on *fd */
static pid_t spawn(int *fd)
{
	int p[2];
	pid_t pid;

	cr_assert(eq(int, pipe(p), 0));
	fflush(NULL);
	pid = fork();
	cr_assert(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		close(p[0]);
		in_child = 1;
		report_fd = p[1];
		return 0;
	}
	close(p[1]);
	*fd = p[0];
	return pid;
}

/* collect - read the child's whole report (until it is gone) */
static char *collect(int fd)
{
	size_t len = 0, cap = 4096;
	char *text = malloc(cap);
	ssize_t n;

	cr_assert_not_null(text);
	for (;;) {
		if (len + 1024 > cap)
			text = realloc(text, cap *= 2);
		n = read(fd, text + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	text[len] = '\0';
	close(fd);
	return text;
}

/* opt_differs - is the optimizer at step lo or hi, every parameter right?
 * 0 and *steps if so, else 1 with why */
static int opt_differs(kvf_store *st, uint64_t lo, uint64_t hi,
		       uint64_t *steps, char *why, size_t why_cap)
{
	static float p[OPT_PARAMS];
	kvf_opt *opt = NULL;
	uint64_t n_params;

	if (kvf_opt_open(st, OPT_NAME, &opt) != KVF_OK ||
	    kvf_opt_steps(opt, steps, &n_params) != KVF_OK ||
	    kvf_opt_read(opt, 0, OPT_PARAMS, p) != KVF_OK) {
		snprintf(why, why_cap, "optimizer: %s", kvf_last_error());
		kvf_opt_close(opt);
		return 1;
	}
	kvf_opt_close(opt);
	if (*steps != lo && *steps != hi) {
		snprintf(why, why_cap,
			 "optimizer at step %" PRIu64 ", expected %" PRIu64
			 " or %" PRIu64,
			 *steps, lo, hi);
		return 1;
	}
	for (uint32_t i = 0; i < OPT_PARAMS; i++)
		if (p[i] != opt_param(*steps, i)) {
			snprintf(why, why_cap,
				 "optimizer step %" PRIu64 ": parameter %u is %g, expected %g",
				 *steps, i, (double)p[i],
				 (double)opt_param(*steps, i));
			return 1;
		}
	return 0;
}

/*
 * check_store - fork a checker: does the store hold `a` (0), or `b` (1),
 * and its optimizer step opt_lo or opt_hi (*opt_steps)?  A checker
 * failure fails the test with its message.
 */
static int check_store(const char *path, const struct model *a,
		       const struct model *b, uint64_t opt_lo, uint64_t opt_hi,
		       uint64_t *opt_steps, const char *what)
{
	int fd, status, which = -1, ok;
	pid_t pid = spawn(&fd);
	char *text;

	if (pid == 0) {
		kvf_options o = crash_opts();
		kvf_store *st = NULL;
		char why_a[256] = "", why_b[256] = "", line[700];
		int n;

		uint64_t steps;

		must(kvf_open(path, &o, &st), "reopen", 0);
		if (opt_differs(st, opt_lo, opt_hi, &steps, why_a,
				sizeof(why_a)))
			fail("%s: %s", what, why_a);
		if (!state_differs(st, a, why_a, sizeof(why_a)))
			n = snprintf(line, sizeof(line), "M 0 %" PRIu64 "\n",
				     steps);
		else if (b && !state_differs(st, b, why_b, sizeof(why_b)))
			n = snprintf(line, sizeof(line), "M 1 %" PRIu64 "\n",
				     steps);
		else
			fail("%s: the reopened store is neither the last sync's state (%s) nor the one in flight (%s)",
			     what, why_a, b ? why_b : "none");
		if (write(report_fd, line, (size_t)n) != n)
			_exit(4);
		must(kvf_close(st), "kvf_close", 0);
		_exit(0);
	}
	text = collect(fd);
	cr_assert(eq(int, waitpid(pid, &status, 0), pid));
	if (strncmp(text, "E ", 2) == 0)
		fail("checker: %s", text + 2);
	ok = WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
	     sscanf(text, "M %d %" SCNu64, &which, opt_steps) == 2;
	cr_assert(ok, "checker died (status %d): %s", status, text);
	free(text);
	return which;
}

static void sleep_us(uint64_t us)
{
	struct timespec ts = { (time_t)(us / 1000000),
			       (long)(us % 1000000) * 1000 };

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* Totals over a test's rounds, for its closing line. */
struct tally {
	unsigned rounds, in_flight;
	uint64_t steps, steps_in_flight, cleaned;
	struct powercut_stats cut;
};

/*
 * round_once - one writer, killed (and with a journal, its power cut);
 * leaves *m at the state the reopened store holds
 */
static void round_once(const char *path, struct model *m, uint64_t seed,
		       unsigned r, const char *journal, struct tally *tl)
{
	uint64_t round_seed = mix(seed + r), k = mix(round_seed + 1);
	unsigned self_kill_at =
		k % 2 ? (unsigned)(1 + (k >> 8) % OPS_PER_ROUND) : 0;
	uint64_t delay_us = self_kill_at ? 0 : 1000 + (k >> 8) % 60000;
	struct script sc = { .rng = round_seed, .after_sync = 1 };
	struct model done, begun, scratch = { 0 };
	uint64_t steps;
	unsigned last_done = 0, last_begun = 0, op_no, n_meta = 0;
	uint64_t step_done = m->opt_steps, step_begun = m->opt_steps;
	uint64_t cleaned = 0;
	int fd, status, which, ok;
	pid_t pid;
	char *text, *line;

	sc.meta_anywhere = getenv("KVF_CRASH_META_ANYWHERE") != NULL;
	/* a writer killed before it armed leaves no journal: nothing to cut */
	if (journal && unlink(journal) != 0 && errno != ENOENT)
		fail("unlink %s: %s", journal, strerror(errno));
	pid = spawn(&fd);
	if (pid == 0)
		writer(path, m, round_seed, self_kill_at, journal);
	if (delay_us) {
		sleep_us(delay_us);
		kill(pid, SIGKILL);
	}
	text = collect(fd);
	cr_assert(eq(int, waitpid(pid, &status, 0), pid));
	if (strstr(text, "E ") != NULL)
		fail("writer (seed %" PRIu64 " round %u): %s", seed, r,
		     strstr(text, "E ") + 2);
	ok = WIFSIGNALED(status) ||
	     (WIFEXITED(status) && WEXITSTATUS(status) == 0);
	cr_assert(ok, "writer status %d", status);
	if (journal) {
		struct powercut_stats cs;
		char why[300];

		if (powercut_apply(journal, mix(round_seed + 2), &cs, why,
				   sizeof(why)) != 0)
			fail("seed %" PRIu64 " round %u: %s", seed, r, why);
		tl->cut.pages += cs.pages;
		tl->cut.kept += cs.kept;
		tl->cut.reverted += cs.reverted;
		tl->cut.torn += cs.torn;
		tl->cut.logs_cut += cs.logs_cut;
		tl->cut.log_bytes += cs.log_bytes;
	}
	/* the last "done", and a "begins" after it */
	for (line = text; *line; line = strchr(line, '\n') + 1) {
		char what;
		unsigned n;

		if (sscanf(line, "%c %u", &what, &n) != 2)
			break;
		if (what == 'D')
			last_done = n;
		else if (what == 'B')
			last_begun = n;
		else if (what == 'Q')
			step_done = n;
		else if (what == 'P')
			step_begun = n;
		else if (what == 'C')
			cleaned = n;
	}
	free(text);
	/* replay the script: the states after ops last_done and last_begun */
	memset(&done, 0, sizeof(done));
	memset(&begun, 0, sizeof(begun));
	model_copy(&done, m);
	model_copy(&begun, m);
	model_copy(&scratch, m);
	for (op_no = 1; op_no <= OPS_PER_ROUND; op_no++) {
		struct op op = decide(&sc, &scratch);

		apply(&sc, &scratch, &op);
		if (op.kind == OP_META && op_no <= last_done)
			n_meta++;
		if (op_no == last_done)
			model_copy(&done, &scratch);
		if (op_no == last_begun)
			model_copy(&begun, &scratch);
	}
	if (last_done == OPS_PER_ROUND + 1)
		model_copy(&done, &scratch);
	if (last_begun == OPS_PER_ROUND + 1)
		model_copy(&begun, &scratch);
	if (getenv("KVF_CRASH_VERBOSE"))
		fprintf(stderr,
			"store_crash: seed %" PRIu64
			" round %u: %s %s %u, last sync done at op %u%s, %u create/fork/free before it\n",
			seed, r, journal ? "power cut" : "killed",
			self_kill_at ? "by itself before op" : "after (us)",
			self_kill_at ? self_kill_at : (unsigned)delay_us,
			last_done, last_begun > last_done ? " (one in flight)" : "",
			n_meta);
	if (step_begun < step_done)
		step_begun = step_done;
	which = check_store(path, &done, last_begun > last_done ? &begun : NULL,
			    step_done, step_begun, &steps,
			    journal ? "after the power cut" : "after the kill");
	tl->rounds++;
	tl->in_flight += last_begun > last_done;
	model_copy(m, which ? &begun : &done);
	tl->steps += steps - m->opt_steps;
	tl->steps_in_flight += step_begun > step_done;
	tl->cleaned += cleaned;
	m->opt_steps = steps;
	model_free(&done);
	model_free(&begun);
	model_free(&scratch);
}

/* run_child - run fn(path, arg) in a child, which must exit 0; its
 * failure fails the test with its message.  The parent never opens a
 * store itself (see the top of this file). */
static void run_child(void (*fn)(const char *path, uint64_t arg),
		     const char *path, uint64_t arg)
{
	int fd, status, ok;
	pid_t pid = spawn(&fd);
	char *text;

	if (pid == 0) {
		fn(path, arg);
		_exit(0);
	}
	text = collect(fd);
	cr_assert(eq(int, waitpid(pid, &status, 0), pid));
	if (strncmp(text, "E ", 2) == 0)
		fail("child: %s", text + 2);
	ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
	cr_assert(ok, "child died (status %d): %s", status, text);
	free(text);
}

/* make_store - the empty store, with a ballast sequence outside the id
 * pool and the optimizer at step 0 (a kill during kvf_open's create is
 * not what these tests are about) */
static void make_store(const char *path, uint64_t unused)
{
	static float init[OPT_PARAMS];
	kvf_options o = crash_opts();
	kvf_store *st = NULL;
	kvf_opt_config c;
	kvf_opt *opt;

	(void)unused;
	must(kvf_open(path, &o, &st), "kvf_open (create)", 0);
	memset(buf_a, 0x5a, (size_t)G * KVH * ROW);
	must(kvf_seq_create(st, BALLAST), "kvf_seq_create", 0);
	must(kvf_append(st, BALLAST, 0, G, buf_a, buf_a), "kvf_append", 0);
	kvf_opt_config_init(&c, KVF_OPT_SGD);
	c.lr = 1;
	c.momentum = 1;
	for (uint32_t i = 0; i < OPT_PARAMS; i++)
		init[i] = opt_param(0, i);
	must(kvf_opt_create(st, OPT_NAME, OPT_PARAMS, &c, init, &opt),
	     "kvf_opt_create", 0);
	must(kvf_opt_close(opt), "kvf_opt_close", 0);
	must(kvf_close(st), "kvf_close", 0);
}

static void create_store(const char *path)
{
	run_child(make_store, path, 0);
}

/* trials - $name if set (a long run: tests/crash/crash-loop.sh), else def */
static unsigned trials(const char *name, unsigned def)
{
	const char *v = getenv(name);

	return v && atoi(v) > 0 ? (unsigned)atoi(v) : def;
}

/*
 * crash_rounds - `n` rounds over stores of ROUNDS rounds each, every one
 * ending with a kill (and, with `power`, a power cut), each followed by a
 * check of the reopened store against the model
 */
static void crash_rounds(const char *test, unsigned n, int power,
			 kvf_media_kind media)
{
	uint64_t base = rng_seed(test);
	struct tally tl = { 0 };

	crash_media = media;
	bufs_alloc();
	for (uint64_t i = 0; tl.rounds < n; i++) {
		uint64_t seed = mix(base + i);
		char *dir = tmpdir_make("crash");
		char *path = strdup(tmp_path(dir, "s"));
		char *journal = strdup(tmp_path(dir, "journal"));
		struct model m = { 0 };

		create_store(path);
		for (unsigned r = 0; r < ROUNDS && tl.rounds < n; r++)
			round_once(path, &m, seed, r, power ? journal : NULL,
				   &tl);
		model_free(&m);
		free(journal);
		free(path);
		tmpdir_remove(dir);
	}
	fprintf(stderr,
		"%s: %u trials (%u with a sync in flight, %" PRIu64
		" with an optimizer step in flight), every synced token back; %" PRIu64
		" optimizer steps checked, %" PRIu64 " segments cleaned\n",
		test, tl.rounds, tl.in_flight, tl.steps_in_flight, tl.steps,
		tl.cleaned);
	if (power)
		fprintf(stderr,
			"%s: power cuts: %" PRIu64 " unsynced pages (%" PRIu64
			" kept, %" PRIu64 " reverted, %" PRIu64 " torn), %" PRIu64
			" catalog logs cut by %" PRIu64 " bytes\n",
			test, tl.cut.pages, tl.cut.kept, tl.cut.reverted,
			tl.cut.torn, tl.cut.logs_cut, tl.cut.log_bytes);
}

TestSuite(store_crash, .timeout = 300);

Test(store_crash, killed_writer)
{
	crash_rounds("store_crash/killed_writer",
		     trials("KVF_CRASH_TRIALS", SEEDS * ROUNDS), 0,
		     KVF_MEDIA_FILE);
}

/* Power cuts: 1000 per run over the suite, in 4 tests so that they run
 * in parallel. */
TestSuite(store_power, .timeout = 600);

Test(store_power, cuts_a)
{
	crash_rounds("store_power/cuts_a", trials("KVF_POWER_TRIALS", 250), 1,
		     KVF_MEDIA_FILE);
}

Test(store_power, cuts_b)
{
	crash_rounds("store_power/cuts_b", trials("KVF_POWER_TRIALS", 250), 1,
		     KVF_MEDIA_FILE);
}

Test(store_power, cuts_c)
{
	crash_rounds("store_power/cuts_c", trials("KVF_POWER_TRIALS", 250), 1,
		     KVF_MEDIA_FILE);
}

Test(store_power, cuts_d)
{
	crash_rounds("store_power/cuts_d", trials("KVF_POWER_TRIALS", 250), 1,
		     KVF_MEDIA_FILE);
}

/* ---- a failed catalog commit -------------------------------------------- */

/* append_model - append n tokens to (seq i, layer) of the store and of m */
static kvf_status append_model(kvf_store *st, struct model *m, uint32_t i,
			       uint32_t layer, uint32_t n)
{
	struct track *t = &m->seqs[i].kv[layer];
	uint64_t tag = ++m->next_tag;
	kvf_status rc;

	for (uint32_t j = 0; j < n; j++)
		for (uint32_t h = 0; h < KVH; h++) {
			size_t off = ((size_t)j * KVH + h) * ROW;

			fill_row(buf_a + off, tag, layer, 0, t->len + j, h);
			fill_row(buf_b + off, tag, layer, 1, t->len + j, h);
		}
	rc = kvf_append(st, seq_id(i), layer, n, buf_a, buf_b);
	if (rc == KVF_OK)
		track_push(t, n, tag);
	return rc;
}

static kvf_status append_x_model(kvf_store *st, struct model *m, uint32_t i,
				 uint32_t layer, uint32_t n)
{
	struct track *t = &m->seqs[i].x[layer];
	uint64_t tag = ++m->next_tag;
	kvf_status rc;

	for (uint32_t j = 0; j < n; j++)
		for (uint32_t q = 0; q < QH; q++)
			fill_row(buf_a + ((size_t)j * QH + q) * ROW, tag, layer,
				 2, t->len + j, q);
	rc = kvf_append_x(st, seq_id(i), layer, n, buf_a);
	if (rc == KVF_OK)
		track_push(t, n, tag);
	return rc;
}

#define OK(call) cr_assert(eq(int, (call), KVF_OK), "%s", kvf_last_error())

/* every call on a fatal handle answers KVF_EFATAL and says to reopen */
#define FATAL(call)                                                           \
	do {                                                                  \
		kvf_status rc_ = (call);                                      \
                                                                              \
		cr_assert(eq(int, rc_, KVF_EFATAL), "%s gave %d (%s)", #call, \
			  rc_, kvf_last_error());                             \
		cr_assert(strstr(kvf_last_error(), "close and reopen") !=     \
				  NULL,                                       \
			  "%s: %s", #call, kvf_last_error());                 \
	} while (0)

enum fatal_at {
	AT_CREATE,
	AT_FORK,
	AT_FREE,
	AT_SYNC,
	AT_APPEND
};

/*
 * fatal_case - sync a state, change more without syncing, make the next
 * catalog commit fail inside the call `at`; then every call is refused
 * until close, and the reopened store holds the synced state.
 */
static void fatal_case(enum fatal_at at)
{
	char *dir = tmpdir_make("fatal");
	char *path = strdup(tmp_path(dir, "s"));
	kvf_options o = crash_opts();
	struct model m = { 0 }, synced = { 0 };
	kvf_store *st = NULL;
	char why[256];
	uint64_t n;
	kvf_status rc;

	bufs_alloc();
	OK(kvf_open(path, &o, &st));
	OK(kvf_seq_create(st, seq_id(0)));
	m.seqs[0].live = 1;
	OK(append_model(st, &m, 0, 0, 100));
	OK(append_model(st, &m, 0, 1, 3 * G));
	OK(append_x_model(st, &m, 0, 0, 40));
	OK(kvf_seq_create(st, seq_id(1)));
	m.seqs[1].live = 1;
	OK(append_model(st, &m, 1, 0, 7));
	OK(kvf_sync(st));
	model_copy(&synced, &m);
	/* unsynced: in group buffers, and sealed pages in open segments */
	OK(append_model(st, &m, 0, 0, 2 * G + 5));
	OK(append_model(st, &m, 1, 1, G));

	catalog_fail_commits(st->cat, 1);
	switch (at) {
	case AT_CREATE:
		rc = kvf_seq_create(st, seq_id(2));
		break;
	case AT_FORK:
		rc = kvf_seq_fork(st, seq_id(0), seq_id(2), 50);
		break;
	case AT_FREE:
		rc = kvf_seq_free(st, seq_id(1));
		break;
	case AT_SYNC:
		rc = kvf_sync(st);
		break;
	default:
		/* enough pages to fill and flush open segments; a segment
		 * may be committed after the call returns (by a writer
		 * thread), so its failure may show only at the sync */
		rc = append_model(st, &m, 0, 1, 20 * G);
		if (rc == KVF_OK)
			rc = kvf_sync(st);
		break;
	}
	cr_assert(eq(int, rc, KVF_EFATAL), "%s", kvf_last_error());
	cr_assert(strstr(kvf_last_error(), "injected failure") != NULL &&
			  strstr(kvf_last_error(),
				 "now unusable: close and reopen it") != NULL,
		  "%s", kvf_last_error());

	FATAL(kvf_seq_create(st, seq_id(3)));
	FATAL(kvf_seq_fork(st, seq_id(0), seq_id(3), 1));
	FATAL(kvf_seq_free(st, seq_id(0)));
	FATAL(kvf_seq_len(st, seq_id(0), 0, &n));
	FATAL(append_model(st, &m, 0, 0, 1));
	FATAL(append_model(st, &m, 0, 0, 3 * G));
	FATAL(append_x_model(st, &m, 0, 0, 1));
	FATAL(kvf_read(st, seq_id(0), 0, 0, 0, 1, buf_a, buf_b));
	FATAL(kvf_read_x(st, seq_id(0), 0, 0, 1, buf_a));
	FATAL(kvf_sync(st));
	cr_assert(strncmp(kvf_last_error(), "kvf_sync: ", 10) == 0, "%s",
		  kvf_last_error());
	/* close releases the handle and says its last writes may be lost */
	FATAL(kvf_close(st));

	OK(kvf_open(path, &o, &st));
	cr_assert(eq(int, state_differs(st, &synced, why, sizeof(why)), 0),
		  "after a failed commit the reopened store is not the last sync's: %s",
		  why);
	/* and it works again */
	OK(append_model(st, &synced, 0, 0, G + 1));
	OK(kvf_close(st));
	OK(kvf_open(path, &o, &st));
	cr_assert(eq(int, state_differs(st, &synced, why, sizeof(why)), 0),
		  "%s", why);
	OK(kvf_close(st));
	model_free(&m);
	model_free(&synced);
	free(path);
	tmpdir_remove(dir);
}

Test(store_crash, commit_fails_in_create)
{
	fatal_case(AT_CREATE);
}

Test(store_crash, commit_fails_in_fork)
{
	fatal_case(AT_FORK);
}

Test(store_crash, commit_fails_in_free)
{
	fatal_case(AT_FREE);
}

Test(store_crash, commit_fails_in_sync)
{
	fatal_case(AT_SYNC);
}

Test(store_crash, commit_fails_in_append)
{
	fatal_case(AT_APPEND);
}

/* A flash store: the emulated device's image is cut like a disk's. */
Test(store_power, flash_cuts)
{
	crash_rounds("store_power/flash_cuts", trials("KVF_POWER_TRIALS", 150),
		     1, KVF_MEDIA_FLASH);
}

Test(store_crash, flash_killed_writer)
{
	crash_rounds("store_crash/flash_killed_writer",
		     trials("KVF_CRASH_TRIALS", 60), 0, KVF_MEDIA_FLASH);
}

/* ---- syncs beside appends ------------------------------------------------ */

/*
 * A thread appends to sequence CONC_SEQ in pieces of a few tokens, sealing
 * groups and segments all the time, while the main thread appends a little
 * to a few other sequences and syncs, so that each sync has partial groups
 * to seal and segments to write for them.  The writer is killed at a
 * random moment and the power cut.  CONC_SEQ's synced length lies between
 * its length before and after the last completed sync, so the check is:
 * it reads back whole, every token right, at least as long as before that
 * sync began.  (A segment the appender sealed during a sync but wrote
 * after the sync's media flush must not count as written before it.)
 */
#define CONC_SEQ 1                /* the appended sequence */
#define CONC_OTHERS 4             /* sequences 2.. synced beside it */
#define CONC_TOKENS (96 * G)      /* the appender stops there */

static _Atomic uint64_t conc_len; /* CONC_SEQ's tokens appended so far */

static void *conc_appender(void *arg)
{
	kvf_store *st = arg;
	unsigned char *k = malloc((size_t)G * KVH * ROW);
	unsigned char *v = malloc((size_t)G * KVH * ROW);
	uint64_t rng = 12345, t = 0;

	if (k == NULL || v == NULL)
		fail("out of memory");
	while (t < CONC_TOKENS) {
		uint32_t n = (uint32_t)(1 + rng_below(&rng, G));

		if (t + n > CONC_TOKENS)
			n = (uint32_t)(CONC_TOKENS - t);
		for (uint32_t i = 0; i < n; i++)
			for (uint32_t h = 0; h < KVH; h++) {
				fill_row(k + ((size_t)i * KVH + h) * ROW, 1, 0, 0,
					 t + i, h);
				fill_row(v + ((size_t)i * KVH + h) * ROW, 1, 0, 1,
					 t + i, h);
			}
		must(kvf_append(st, CONC_SEQ, 0, n, k, v), "kvf_append", 0);
		t += n;
		atomic_store(&conc_len, t);
	}
	free(k);
	free(v);
	return NULL;
}

/* conc_writer - the child: syncs beside the appender until killed */
static void conc_writer(const char *path, const char *journal)
{
	kvf_options o = crash_opts();
	kvf_store *st = NULL;
	pthread_t th;
	uint64_t rng = 777;

	if (powercut_arm(journal, path) != 0)
		fail("powercut_arm %s: %s", journal, strerror(errno));
	must(kvf_open(path, &o, &st), "kvf_open", 0);
	if (pthread_create(&th, NULL, conc_appender, st) != 0)
		fail("pthread_create");
	for (;;) {
		uint64_t before = atomic_load(&conc_len);

		for (uint32_t s = 0; s < CONC_OTHERS; s++) {
			uint32_t n = (uint32_t)(1 + rng_below(&rng, 3));

			memset(buf_a, (int)s, (size_t)n * KVH * ROW);
			must(kvf_append(st, 2 + s, 0, n, buf_a, buf_a),
			     "kvf_append", 0);
		}
		announce('B', (unsigned)before);
		must(kvf_sync(st), "kvf_sync", 0);
		announce('D', (unsigned)before);
	}
}

/* conc_check - the checker: CONC_SEQ whole and at least `least` long */
static void conc_check(const char *path, uint64_t least)
{
	kvf_options o = crash_opts();
	kvf_store *st = NULL;
	struct track t = { 0 };
	char why[256];
	uint64_t n;

	must(kvf_open(path, &o, &st), "reopen", 0);
	must(kvf_seq_len(st, CONC_SEQ, 0, &n), "kvf_seq_len", 0);
	if (n < least || n > CONC_TOKENS)
		fail("sequence %d has %" PRIu64
		     " tokens; the last sync began at %" PRIu64,
		     CONC_SEQ, n, least);
	track_push(&t, n, 1);
	for (uint32_t h = 0; h < KVH; h++) {
		must(kvf_read(st, CONC_SEQ, 0, h, 0, n, buf_a, buf_b),
		     "kvf_read", 0);
		if (check_rows(&t, 0, 0, h, 0, n, buf_a, ROW, why, sizeof(why)) ||
		    check_rows(&t, 0, 1, h, 0, n, buf_b, ROW, why, sizeof(why)))
			fail("%s", why);
	}
	free(t.runs);
	must(kvf_close(st), "kvf_close", 0);
}

/* conc_create - a store with CONC_SEQ and the others, empty */
static void conc_create(const char *path, uint64_t unused)
{
	kvf_options o = crash_opts();
	kvf_store *st = NULL;

	(void)unused;
	must(kvf_open(path, &o, &st), "kvf_open (create)", 0);
	for (uint32_t s = 0; s <= CONC_OTHERS; s++)
		must(kvf_seq_create(st, CONC_SEQ + s), "kvf_seq_create", 0);
	must(kvf_close(st), "kvf_close", 0);
}

Test(store_power, syncs_beside_appends)
{
	uint64_t rng = rng_seed("store_power/syncs_beside_appends");
	unsigned n = trials("KVF_POWER_TRIALS", 100);
	struct powercut_stats total = { 0 };

	crash_media = KVF_MEDIA_FILE;
	bufs_alloc();
	for (unsigned r = 0; r < n; r++) {
		char *dir = tmpdir_make("conc");
		char *path = strdup(tmp_path(dir, "s"));
		char *journal = strdup(tmp_path(dir, "journal"));
		uint64_t least = 0;
		struct powercut_stats cs;
		char why[300], *text, *line;
		int fd, status;
		pid_t pid;

		atomic_store(&conc_len, 0);
		run_child(conc_create, path, 0);
		pid = spawn(&fd);
		if (pid == 0)
			conc_writer(path, journal);
		sleep_us(2000 + rng_below(&rng, 40000));
		kill(pid, SIGKILL);
		text = collect(fd);
		cr_assert(eq(int, waitpid(pid, &status, 0), pid));
		if (strstr(text, "E ") != NULL)
			fail("writer (round %u): %s", r, strstr(text, "E ") + 2);
		for (line = text; *line; line = strchr(line, '\n') + 1) {
			char what;
			unsigned v;

			if (sscanf(line, "%c %u", &what, &v) != 2)
				break;
			if (what == 'D')
				least = v;
		}
		free(text);
		if (powercut_apply(journal, rng_next(&rng), &cs, why,
				   sizeof(why)) != 0)
			fail("round %u: %s", r, why);
		total.pages += cs.pages;
		total.reverted += cs.reverted;
		total.torn += cs.torn;
		run_child(conc_check, path, least);
		free(journal);
		free(path);
		tmpdir_remove(dir);
	}
	fprintf(stderr,
		"store_power/syncs_beside_appends: %u trials, every synced token back; %" PRIu64
		" unsynced pages (%" PRIu64 " reverted, %" PRIu64 " torn)\n",
		n, total.pages, total.reverted, total.torn);
}
