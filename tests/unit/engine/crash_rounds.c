/*
 * crash_rounds.c - the rounds of the crash and power-cut tests: the seeded
 * script, the writer child, and the parent that kills it, cuts the power,
 * replays the script and has a checker reopen the store (see the top of
 * test_store_crash.c).
 */
#include "crash_model.h"

#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "powercut.h"
#include "testutil.h"

/* ---- the script --------------------------------------------------------- */

enum op_kind {
	OP_APPEND,
	OP_APPEND_X,
	OP_SYNC,
	OP_META,
	OP_READ,
	OP_OPT_STEP,
	OP_TRUNCATE
};

struct script {
	uint64_t rng;      /* state */
	int after_sync;    /* the last operation was a sync (or the start) */
	int meta_anywhere; /* KVF_CRASH_META_ANYWHERE */
	uint64_t synced[ID_POOL][LAYERS][2]; /* K/V and X lengths as of the
					      * last sync */
};

/* One decided operation: what step() will do, enough to replay it. */
struct op {
	enum op_kind kind;
	uint32_t seq, layer, n, child; /* pool indexes, layer, tokens */
	int meta;                      /* 0 create, 1 fork, 2 free;
					* OP_TRUNCATE: 1 = followed by a
					* sync (any point), 0 = alone (only
					* tokens appended since the sync) */
	uint64_t tag, fork_at;         /* fork_at: also the cut */
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

/*
 * model_bytes - the bytes of whole and partial groups the live sequences
 * hold, as if none shared a page with another: a bound on what the store
 * keeps live for them
 */
static uint64_t model_bytes(const struct model *m)
{
	uint64_t b = 0;

	for (uint32_t i = 0; i < ID_POOL; i++) {
		if (!m->seqs[i].live)
			continue;
		for (uint32_t l = 0; l < LAYERS; l++)
			b += (m->seqs[i].kv[l].len + G - 1) / G * KV_GROUP_BYTES +
			     (m->seqs[i].x[l].len + G - 1) / G * X_GROUP_BYTES;
	}
	return b;
}

/*
 * decide_cut - a kvf_seq_truncate of sequence s.  Right after a sync it
 * may cut anywhere, and is followed by its own sync (as create, fork and
 * free are: it commits at once, which the exact checks cannot follow).
 * Elsewhere it cuts only tokens appended since the last sync, which
 * changes nothing the store promised: a crash must bring back the sync's
 * state exactly.  When there is no such cut, it is a read.
 */
static void decide_cut(struct script *sc, const struct model *m, uint32_t s,
		       struct op *op)
{
	uint64_t lo = 0, hi = UINT64_MAX;

	for (uint32_t l = 0; l < LAYERS; l++) {
		if (m->seqs[s].kv[l].len < hi)
			hi = m->seqs[s].kv[l].len;
		for (int k = 0; k < 2 && !sc->after_sync; k++)
			if (sc->synced[s][l][k] > lo)
				lo = sc->synced[s][l][k];
	}
	op->kind = OP_READ;
	if (lo > hi)
		return;
	op->kind = OP_TRUNCATE;
	op->meta = sc->after_sync;
	op->fork_at = lo + rng_below(&sc->rng, hi - lo + 1);
}

/* script_synced - the script starts on a store holding m, all of it
 * synced (a round starts on a reopened store) */
static void script_synced(struct script *sc, const struct model *m)
{
	for (uint32_t i = 0; i < ID_POOL; i++)
		for (uint32_t l = 0; l < LAYERS; l++) {
			sc->synced[i][l][0] = m->seqs[i].kv[l].len;
			sc->synced[i][l][1] = m->seqs[i].x[l].len;
		}
}

/* cut_track - t keeps its first n tokens */
static void cut_track(struct track *t, uint64_t n)
{
	struct track c = { 0 };

	track_prefix(&c, t, n);
	track_prefix(t, &c, c.len);
	free(c.runs);
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
				op.fork_at -= op.fork_at % crash_g;
		} else {
			op.meta = 2;
		}
		op.tag = ++m->next_tag; /* a creation's ids (create_with_ids) */
		return op;
	}
	op.seq = s;
	op.layer = (uint32_t)rng_below(&sc->rng, LAYERS);
	if (r < 50) {
		op.kind = OP_APPEND;
		op.n = pick_n(sc);
		if (m->seqs[s].kv[op.layer].len + op.n > MAX_TOKENS ||
		    model_bytes(m) + ((uint64_t)op.n + G - 1) / G * KV_GROUP_BYTES >
			    LIVE_BYTES_MAX)
			op.n = 0;
	} else if (r < 58) {
		op.kind = OP_APPEND_X;
		op.n = pick_n(sc);
		if (m->seqs[s].x[op.layer].len + op.n > MAX_TOKENS ||
		    model_bytes(m) + ((uint64_t)op.n + G - 1) / G * X_GROUP_BYTES >
			    LIVE_BYTES_MAX)
			op.n = 0;
	} else if (r < 75) {
		op.kind = OP_SYNC;
	} else if (r < 90) {
		op.kind = OP_OPT_STEP;
	} else if (r < 95) {
		op.kind = OP_READ;
	} else {
		decide_cut(sc, m, s, &op);
	}
	op.tag = ++m->next_tag;
	return op;
}

/* apply - what op does to the reference */
static void apply(struct script *sc, struct model *m, const struct op *op)
{
	struct mseq *s = &m->seqs[op->seq];

	sc->after_sync = op->kind == OP_SYNC ||
			 (op->kind == OP_META && !sc->meta_anywhere) ||
			 (op->kind == OP_TRUNCATE && op->meta);
	switch (op->kind) {
	case OP_TRUNCATE:
		for (uint32_t l = 0; l < LAYERS; l++) {
			cut_track(&s->kv[l], op->fork_at);
			if (s->x[l].len > op->fork_at)
				cut_track(&s->x[l], op->fork_at);
		}
		break;
	case OP_APPEND:
		track_push(&s->kv[op->layer], op->n, op->tag);
		break;
	case OP_APPEND_X:
		track_push(&s->x[op->layer], op->n, op->tag);
		break;
	case OP_OPT_STEP:
		m->optim_steps++;
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
	if (sc->after_sync)
		for (uint32_t i = 0; i < ID_POOL; i++)
			for (uint32_t l = 0; l < LAYERS; l++) {
				sc->synced[i][l][0] = m->seqs[i].kv[l].len;
				sc->synced[i][l][1] = m->seqs[i].x[l].len;
			}
}

/* ---- the writer child --------------------------------------------------- */

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

static kvf_opt *writer_optim; /* the writer's handle to OPTIM_NAME */

/* optim_step - step writer_optim to step n; "P n" before, "Q n" once durable */
static void optim_step(uint64_t n, unsigned op_no)
{
	static float g[OPTIM_PARAMS];
	kvf_grad grad = { .dtype = KVF_DTYPE_F32, .values = g,
			  .n = OPTIM_PARAMS };

	for (uint32_t i = 0; i < OPTIM_PARAMS; i++)
		g[i] = optim_grad(n, i);
	announce('P', (unsigned)n);
	must(kvf_opt_step(writer_optim, &grad, NULL), "kvf_opt_step", op_no);
	announce('Q', (unsigned)n);
}

/* create_with_ids - make sequence child with token ids of its own (the
 * first is the op's tag, unique in the model's history, so no lookup ever
 * matches another's): its whole
 * groups are published as prefix chunks, and its kvf_seq_free leaves a
 * cached prefix behind (docs/prefix.md) that the cleaner, eviction,
 * recovery and the checks live with, invisible to the model */
static void create_with_ids(kvf_store *st, uint64_t child, uint64_t tag,
			    unsigned op_no)
{
	static uint32_t ids[MAX_TOKENS];
	uint64_t got = 0;

	ids[0] = (uint32_t)tag;
	for (uint32_t i = 1; i < MAX_TOKENS; i++)
		ids[i] = (uint32_t)mix(tag << 20 ^ i);
	must(kvf_seq_create_tokens(st, child, ids, MAX_TOKENS, &got),
	     "kvf_seq_create_tokens", op_no);
	if (got != 0)
		fail("writer op %u: sequence %" PRIu64 " shared %" PRIu64
		     " tokens of ids no other has", op_no, child, got);
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
	case OP_TRUNCATE:
		if (op->meta)
			announce('B', op_no);
		must(kvf_seq_truncate(st, id, op->fork_at), "kvf_seq_truncate",
		     op_no);
		if (op->meta) {
			must(kvf_sync(st), "kvf_sync", op_no);
			announce('D', op_no);
		}
		break;
	case OP_OPT_STEP:
		optim_step(m->optim_steps + 1, op_no);
		break;
	case OP_META: {
		uint64_t child = seq_id(op->child);

		/* with the workaround: "begins" covers the call and its sync */
		if (!getenv("KVF_CRASH_META_ANYWHERE"))
			announce('B', op_no);
		if (op->meta == 0)
			create_with_ids(st, child, op->tag, op_no);
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

	script_synced(&sc, m);
	sc.meta_anywhere = getenv("KVF_CRASH_META_ANYWHERE") != NULL;
	if (journal && powercut_arm(journal, path) != 0)
		fail("powercut_arm %s: %s", journal, strerror(errno));
	must(kvf_open(path, &o, &st), "kvf_open", 0);
	must_store = st;
	/* a sequence created and freed after the state the model accepted
	 * left a cached prefix whose ids this round's tags may repeat, with
	 * other K/V: the cache goes (create_with_ids) */
	must(kvf_prefix_drop(st, KVF_SEQ_NONE, NULL), "kvf_prefix_drop", 0);
	must(kvf_opt_open(st, OPTIM_NAME, &writer_optim), "kvf_opt_open", 0);
	for (unsigned i = 1; i <= OPS_PER_ROUND; i++) {
		struct op op = decide(&sc, m);

		if (i == self_kill_at)
			raise(SIGKILL);
		run_op(st, m, &op, i, &read_rng);
		apply(&sc, m, &op);
	}
	announce('B', OPS_PER_ROUND + 1);
	must(kvf_opt_close(writer_optim), "kvf_opt_close", OPS_PER_ROUND + 1);
	must_store = NULL;
	must(kvf_close(st), "kvf_close", OPS_PER_ROUND + 1);
	announce('D', OPS_PER_ROUND + 1);
	_exit(0);
}

/* ---- the parent ---------------------------------------------------------- */

/* optim_differs - is the optimizer at step lo or hi, every parameter right?
 * 0 and *steps if so, else 1 with why */
static int optim_differs(kvf_store *st, uint64_t lo, uint64_t hi,
		       uint64_t *steps, char *why, size_t why_cap)
{
	static float p[OPTIM_PARAMS];
	kvf_opt *opt = NULL;
	uint64_t n_params;

	if (kvf_opt_open(st, OPTIM_NAME, &opt) != KVF_OK ||
	    kvf_opt_steps(opt, steps, &n_params) != KVF_OK ||
	    kvf_opt_read(opt, 0, OPTIM_PARAMS, p) != KVF_OK) {
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
	for (uint32_t i = 0; i < OPTIM_PARAMS; i++)
		if (p[i] != optim_param(*steps, i)) {
			snprintf(why, why_cap,
				 "optimizer step %" PRIu64 ": parameter %u is %g, expected %g",
				 *steps, i, (double)p[i],
				 (double)optim_param(*steps, i));
			return 1;
		}
	return 0;
}

/*
 * check_store - fork a checker: does the store hold `a` (0), `b` (1) or
 * `c` (2), and its optimizer step optim_lo or optim_hi (*optim_steps)?  A
 * checker failure fails the test with its message.
 */
static int check_store(const char *path, const struct model *a,
		       const struct model *b, const struct model *c,
		       uint64_t optim_lo, uint64_t optim_hi,
		       uint64_t *optim_steps, const char *what)
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
		if (optim_differs(st, optim_lo, optim_hi, &steps, why_a,
				sizeof(why_a)))
			fail("%s: %s", what, why_a);
		if (!state_differs(st, a, why_a, sizeof(why_a)))
			n = snprintf(line, sizeof(line), "M 0 %" PRIu64 "\n",
				     steps);
		else if (b && !state_differs(st, b, why_b, sizeof(why_b)))
			n = snprintf(line, sizeof(line), "M 1 %" PRIu64 "\n",
				     steps);
		else if (c && !state_differs(st, c, why_b, sizeof(why_b)))
			n = snprintf(line, sizeof(line), "M 2 %" PRIu64 "\n",
				     steps);
		else
			fail("%s: the reopened store is neither the last sync's state (%s) nor the one in flight (%s)",
			     what, why_a, b ? why_b : "none");
		if (write(report_fd, line, (size_t)n) != n)
			_exit(4);
		must(kvf_close(st), "kvf_close", 0);
		_exit(0);
	}
	text = fx_collect(fd);
	cr_assert(eq(int, waitpid(pid, &status, 0), pid));
	if (strncmp(text, "E ", 2) == 0)
		fail("checker: %s", text + 2);
	ok = WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
	     sscanf(text, "M %d %" SCNu64, &which, optim_steps) == 2;
	cr_assert(ok, "checker died (status %d): %s", status, text);
	free(text);
	return which;
}

/* Totals over a test's rounds, for its closing line. */
struct tally {
	unsigned rounds, in_flight;
	unsigned cuts, cuts_unsynced; /* truncations before the kill: all,
				       * and those of unsynced tokens only */
	uint64_t steps, steps_in_flight, cleaned;
	uint64_t peak_bytes; /* model_bytes at its highest */
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
	struct model done, begun, clipped = { 0 }, scratch = { 0 };
	struct op flight = { 0 }; /* the op in flight, when one is */
	uint64_t steps;
	unsigned last_done = 0, last_begun = 0, op_no, n_meta = 0;
	uint64_t step_done = m->optim_steps, step_begun = m->optim_steps;
	uint64_t cleaned = 0;
	int fd, status, which, ok;
	pid_t pid;
	char *text, *line;

	sc.meta_anywhere = getenv("KVF_CRASH_META_ANYWHERE") != NULL;
	script_synced(&sc, m);
	/* a writer killed before it armed leaves no journal: nothing to cut */
	if (journal && unlink(journal) != 0 && errno != ENOENT)
		fail("unlink %s: %s", journal, strerror(errno));
	pid = spawn(&fd);
	if (pid == 0)
		writer(path, m, round_seed, self_kill_at, journal);
	if (delay_us) {
		fx_sleep_us(delay_us);
		kill(pid, SIGKILL);
	}
	text = fx_collect(fd);
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
		if (op_no <= last_begun && model_bytes(&scratch) > tl->peak_bytes)
			tl->peak_bytes = model_bytes(&scratch);
		if (op.kind == OP_META && op_no <= last_done)
			n_meta++;
		if (op.kind == OP_TRUNCATE && op_no <= last_begun) {
			tl->cuts++;
			tl->cuts_unsynced += !op.meta;
		}
		if (op_no == last_done)
			model_copy(&done, &scratch);
		if (op_no == last_begun) {
			model_copy(&begun, &scratch);
			flight = op;
		}
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
	/*
	 * A sequence the op in flight forked may come back without its partial
	 * tail groups: the fork committed its length, the tails are written
	 * only by the sync that follows, and recovery cuts a length back to
	 * the groups on media (a prefix of what was appended).
	 */
	model_copy(&clipped, &begun);
	for (uint32_t i = 0; i < ID_POOL; i++) {
		if (!clipped.seqs[i].live || done.seqs[i].live)
			continue;
		for (uint32_t l = 0; l < LAYERS; l++) {
			struct track t = { 0 };

			track_prefix(&t, &clipped.seqs[i].kv[l],
				     clipped.seqs[i].kv[l].len / crash_g * crash_g);
			track_prefix(&clipped.seqs[i].kv[l], &t, t.len);
			track_prefix(&t, &clipped.seqs[i].x[l],
				     clipped.seqs[i].x[l].len / crash_g * crash_g);
			track_prefix(&clipped.seqs[i].x[l], &t, t.len);
			free(t.runs);
		}
	}
	/*
	 * With a codec, a truncation in flight that cut inside a group the
	 * record had sealed (the last sync's length is past that group)
	 * committed only the whole groups below the cut for that layer (the
	 * kept tokens reach the media plain at the sync that follows): its
	 * K/V length may come back at the group's start.
	 */
	if (crash_codec != KVF_CODEC_NONE && last_begun > last_done &&
	    last_begun <= OPS_PER_ROUND && flight.kind == OP_TRUNCATE)
		for (uint32_t l = 0; l < LAYERS; l++) {
			struct track *t = &clipped.seqs[flight.seq].kv[l];
			uint64_t at = flight.fork_at / crash_g * crash_g;

			if (flight.fork_at % crash_g && t->len > at &&
			    done.seqs[flight.seq].kv[l].len / crash_g >
				    flight.fork_at / crash_g)
				cut_track(t, at);
		}
	which = check_store(path, &done, last_begun > last_done ? &begun : NULL,
			    last_begun > last_done ? &clipped : NULL,
			    step_done, step_begun, &steps,
			    journal ? "after the power cut" : "after the kill");
	tl->rounds++;
	tl->in_flight += last_begun > last_done;
	model_copy(m, which == 2 ? &clipped : which ? &begun : &done);
	tl->steps += steps - m->optim_steps;
	tl->steps_in_flight += step_begun > step_done;
	tl->cleaned += cleaned;
	m->optim_steps = steps;
	model_free(&done);
	model_free(&begun);
	model_free(&clipped);
	model_free(&scratch);
}

/* make_store - the empty store, with a ballast sequence outside the id
 * pool and the optimizer at step 0 (a kill during kvf_open's create is
 * not what these tests are about) */
static void make_store(const char *path, uint64_t unused)
{
	static float init[OPTIM_PARAMS];
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
	for (uint32_t i = 0; i < OPTIM_PARAMS; i++)
		init[i] = optim_param(0, i);
	must(kvf_opt_create(st, OPTIM_NAME, OPTIM_PARAMS, &c, init, &opt),
	     "kvf_opt_create", 0);
	must(kvf_opt_close(opt), "kvf_opt_close", 0);
	must(kvf_close(st), "kvf_close", 0);
}

static void create_store(const char *path)
{
	run_child(make_store, path, 0);
}

/*
 * crash_rounds - `n` rounds over stores of ROUNDS rounds each, every one
 * ending with a kill (and, with `power`, a power cut), each followed by a
 * check of the reopened store against the model
 */
void crash_rounds(const char *test, unsigned n, int power,
			 kvf_media_kind media)
{
	uint64_t base = rng_seed(test);
	struct tally tl = { 0 };

	crash_media = media;
	if (crash_codec == KVF_CODEC_NONE)
		crash_codec_set(KVF_CODEC_NONE); /* $KVF_CRASH_CODEC's */
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
		" optimizer steps checked, %" PRIu64
		" segments cleaned; %u truncations (%u of unsynced tokens); live data at most %.1f MiB\n",
		test, tl.rounds, tl.in_flight, tl.steps_in_flight, tl.steps,
		tl.cleaned, tl.cuts, tl.cuts_unsynced,
		(double)tl.peak_bytes / (1 << 20));
	if (power)
		fprintf(stderr,
			"%s: power cuts: %" PRIu64 " unsynced pages (%" PRIu64
			" kept, %" PRIu64 " reverted, %" PRIu64 " torn), %" PRIu64
			" catalog logs cut by %" PRIu64 " bytes\n",
			test, tl.cut.pages, tl.cut.kept, tl.cut.reverted,
			tl.cut.torn, tl.cut.logs_cut, tl.cut.log_bytes);
}

