/*
 * test_cleaner.c - the cleaner makes room: frequent syncs leave many
 * partly filled segments, and a store too small to hold them all must
 * compact them (copying live pages, forked ones for every owner) and keep
 * every token readable, across a reopen too.  Live data that really does
 * not fit is refused with KVF_ENOSPC and changes nothing.  Optimizer pages
 * the cleaner copies keep their runs ("G" records, engine/base/meta.h) and the
 * optimizer steps on from them after a reopen, bit for bit.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/optim.h"
#include "engine/base/catalog.h"
#include "engine/cleaning/cleaner.h"
#include "engine/base/meta.h"
#include "engine/base/store_state.h"
#include "kvflash.h"
#include "store_fixture.h"
#include "testutil.h"


TestSuite(cleaner, .init = fx_setup_dir, .fini = fx_teardown, .timeout = 120);

static kvf_store *open_tiny(uint64_t capacity)
{
	kvf_model m = { LAYERS, KVH, KVH, DIM, KVF_DTYPE_F16 };
	kvf_options o;
	kvf_store *st = NULL;

	o = fx_options_for(&m, 64 * 1024, capacity, 2); /* 16 pages: 15 data + 1 summary */
	o.dram_budget = 0; /* every sealed page on media at once: these tests
			    * count segments */
	cr_assert(eq(int, kvf_open(fx.path, &o, &st), KVF_OK), "%s",
		  kvf_last_error());
	return st;
}

/* append - n tokens (data_seq's values, fx_append) to every layer of seq
 * from t0; the first failure's status */
static kvf_status append(kvf_store *st, uint64_t seq, uint64_t data_seq,
			 uint64_t t0, uint32_t n)
{
	kvf_status rc = KVF_OK;

	for (uint32_t l = 0; l < LAYERS && rc == KVF_OK; l++)
		rc = fx_append(st, seq, data_seq, l, t0, n);
	return rc;
}

/* check - tokens [0, t1) of every layer and head of seq hold data_seq's
 * values */
static void check(kvf_store *st, uint64_t seq, uint64_t data_seq, uint64_t t1)
{
	for (uint32_t l = 0; l < LAYERS; l++)
		fx_check_tokens(st, seq, data_seq, l, 0, t1);
}

/* A small trickle of tokens and a sync each time: each sync writes the
 * partial groups and seals a mostly empty segment.  Without the cleaner the
 * 40 segments run out long before the data does. */
Test(cleaner, compacts_partly_filled_segments)
{
	kvf_store *st = open_tiny(40 * 64 * 1024);
	kvf_stats s = { .struct_size = sizeof(s) };
	uint64_t t = 0;

	cr_assert(eq(int, kvf_seq_create(st, 1), KVF_OK));
	for (int round = 0; round < 120; round++) {
		cr_assert(eq(int, append(st, 1, 1, t, 5), KVF_OK), "round %d: %s",
			  round, kvf_last_error());
		t += 5;
		cr_assert(eq(int, kvf_sync(st), KVF_OK), "round %d: %s", round,
			  kvf_last_error());
	}
	check(st, 1, 1, t);
	cr_assert(eq(int, kvf_stats_get(st, &s), KVF_OK));
	cr_assert(s.segments_cleaned > (0), "the cleaner never ran");
	cr_assert(s.cleaner_bytes > (0));
	cr_assert(eq(int, kvf_close(st), KVF_OK), "%s", kvf_last_error());
	st = NULL;
	cr_assert(eq(int, kvf_open(fx.path, NULL, &st), KVF_OK), "%s",
		  kvf_last_error());
	check(st, 1, 1, t);
	cr_assert(eq(int, kvf_close(st), KVF_OK));
}

/* Pages shared by a fork move for both owners; the parent is freed so its
 * own slots are gone while the child's stay. */
Test(cleaner, moves_shared_pages_for_every_owner)
{
	kvf_store *st = open_tiny(48 * 64 * 1024);
	uint64_t t = 0;

	cr_assert(eq(int, kvf_seq_create(st, 1), KVF_OK));
	for (int round = 0; round < 20; round++) {
		cr_assert(eq(int, append(st, 1, 1, t, 7), KVF_OK), "%s", kvf_last_error());
		t += 7;
		cr_assert(eq(int, kvf_sync(st), KVF_OK), "%s", kvf_last_error());
	}
	cr_assert(eq(int, kvf_seq_fork(st, 1, 2, t), KVF_OK), "%s", kvf_last_error());
	cr_assert(eq(int, kvf_seq_fork(st, 1, 3, t - 40), KVF_OK), "%s", kvf_last_error());
	cr_assert(eq(int, kvf_seq_free(st, 1), KVF_OK));
	/* more partly filled segments from another sequence force cleaning */
	cr_assert(eq(int, kvf_seq_create(st, 4), KVF_OK));
	for (uint64_t u = 0, round = 0; round < 80; round++, u += 3) {
		cr_assert(eq(int, append(st, 4, 4, u, 3), KVF_OK), "round %llu: %s",
			  (unsigned long long)round, kvf_last_error());
		cr_assert(eq(int, kvf_sync(st), KVF_OK), "%s", kvf_last_error());
	}
	check(st, 2, 1, t);
	check(st, 3, 1, t - 40);
	check(st, 4, 4, 240);
	cr_assert(eq(int, kvf_close(st), KVF_OK), "%s", kvf_last_error());
	st = NULL;
	cr_assert(eq(int, kvf_open(fx.path, NULL, &st), KVF_OK), "%s",
		  kvf_last_error());
	check(st, 2, 1, t);
	check(st, 3, 1, t - 40);
	check(st, 4, 4, 240);
	cr_assert(eq(int, kvf_close(st), KVF_OK));
}

/* Live data beyond capacity: KVF_ENOSPC, and the refused append changed
 * nothing; freeing a sequence makes room again. */
Test(cleaner, enospc_when_live_data_fills_the_store)
{
	kvf_store *st = open_tiny(16 * 64 * 1024);
	uint64_t t = 0, n;
	kvf_status rc;

	cr_assert(eq(int, kvf_seq_create(st, 1), KVF_OK));
	cr_assert(eq(int, kvf_seq_create(st, 2), KVF_OK));
	for (;;) {
		rc = append(st, 1, 1, t, 32);
		if (rc != KVF_OK)
			break;
		t += 32;
		cr_assert(lt(u64, t, 100000));
	}
	cr_assert(eq(int, rc, KVF_ENOSPC), "%s", kvf_last_error());
	cr_assert(ne(ptr, strstr(kvf_last_error(), "full of live data"), NULL),
		  "%s", kvf_last_error());
	/* layer 0 of the failed append may have gone in before layer 1 was
	 * refused: each kvf_append call is all or nothing on its own */
	cr_assert(eq(int, kvf_seq_len(st, 1, LAYERS - 1, &n), KVF_OK));
	cr_assert(eq(u64, n, t));
	check(st, 1, 1, t);
	cr_assert(eq(int, kvf_seq_free(st, 1), KVF_OK));
	cr_assert(eq(int, append(st, 2, 2, 0, 64), KVF_OK), "%s", kvf_last_error());
	check(st, 2, 2, 64);
	cr_assert(eq(int, kvf_close(st), KVF_OK));
}

/* ---- optimizer pages ---------------------------------------------------- */

/*
 * Each optimizer create and step writes one whole generation into
 * segments of its own and flushes the last one partly filled: with 302
 * chunks of params, m and v (906 pages) on one stripe of 15-page
 * segments, the last holds v's chunks 296-301, all live, one run.  The
 * cleaner takes such segments, and must copy the run whole.  One stripe,
 * so that the pages of a segment hold consecutive chunks.
 */
#define OPTIM_CHUNKS 302u
#define OPTIM_N (OPTIM_CHUNKS * 1024u) /* fp32 params: 1024 a 4 KiB page */
#define OPTIM_SEGS 140u                /* 61 a generation, twice, and the
					* cleaner's 1: 123; KV fills the
					* rest until the cleaner copies */

static kvf_store *open_one_stripe(void)
{
	kvf_model m = { LAYERS, KVH, KVH, DIM, KVF_DTYPE_F16 };
	kvf_options o;
	kvf_store *st = NULL;

	o = fx_options_for(&m, 64 * 1024, (uint64_t)OPTIM_SEGS * 64 * 1024, 1); /* 15 data pages + 1 summary */
	cr_assert(eq(int, kvf_open(fx.path, &o, &st), KVF_OK), "%s",
		  kvf_last_error());
	return st;
}

/* urand - uniform in [-0.5, 0.5) */
static float urand(uint64_t *rng)
{
	return (float)((double)(rng_next(rng) >> 11) / 9007199254740992.0 - 0.5);
}

struct optim_twin {
	float *p, *m, *v; /* the reference state */
	uint64_t t;       /* its steps */
};

static void twin_step(struct optim_twin *w, const kvf_opt_config *c,
		      const float *g, float *out)
{
	struct kvc_optim_step s;

	kvc_optim_step_prepare(&s, c, ++w->t, 1.0f);
	kvc_optim_dense(kvc_optim(), &s, w->p, w->m, w->v, OPTIM_N, g,
			KVF_DTYPE_F32, out);
}

/* both_step - one step on o and its twin: params_out must match */
static void both_step(kvf_opt *o, struct optim_twin *w, const kvf_opt_config *c,
		      uint64_t *rng, float *g, float *out, float *want)
{
	kvf_grad gr = { .dtype = KVF_DTYPE_F32, .values = g, .n = OPTIM_N };

	for (uint32_t i = 0; i < OPTIM_N; i++)
		g[i] = urand(rng);
	twin_step(w, c, g, want);
	cr_assert(eq(int, kvf_opt_step(o, &gr, out), KVF_OK), "%s",
		  kvf_last_error());
	cr_assert(eq(int, memcmp(out, want, OPTIM_N * sizeof(float)), 0),
		  "params_out differs from the twin's");
}

struct optim_run_find {
	uint32_t n_max; /* longest optimizer run in a cleaner-written record */
};

static int find_cleaned_optim_run(void *arg, const void *key, size_t klen,
				const void *val, size_t vlen)
{
	struct optim_run_find *f = arg;
	struct meta_seg rec;

	(void)key;
	(void)klen;
	memcpy(&rec, val, sizeof(rec));
	cr_assert(eq(sz, vlen,
		     sizeof(rec) + rec.n_runs * sizeof(struct meta_run)));
	if (rec.owner != KVF_SEQ_NONE)
		return 0; /* a writer's, not the cleaner's */
	for (uint32_t i = 0; i < rec.n_runs; i++) {
		struct meta_run r;

		memcpy(&r, (const char *)val + sizeof(rec) + i * sizeof(r),
		       sizeof(r));
		if (r.ns == SEQ_NS_OPTIM && r.n > f->n_max)
			f->n_max = r.n;
	}
	return 0;
}

/*
 * The cleaner copies live optimizer pages (the last, partly filled
 * segment of a generation) with KV pages, writes them as one run in its
 * record, and after a reopen the optimizer steps on from the copies:
 * params_out and the params match a twin stepped on plain arrays bit for
 * bit, and so does every KV token.
 */
Test(cleaner, moves_optimizer_runs)
{
	uint64_t rng = rng_seed("cleaner moves_optimizer_runs");
	struct optim_twin w = { malloc(OPTIM_N * 4), malloc(OPTIM_N * 4),
			      malloc(OPTIM_N * 4), 0 };
	float *g = malloc(OPTIM_N * 4), *out = malloc(OPTIM_N * 4),
	      *want = malloc(OPTIM_N * 4);
	kvf_stats s = { .struct_size = sizeof(s) };
	struct optim_run_find f = { 0 };
	struct catalog *cat = NULL;
	unsigned char tag = META_TAG_SEG;
	kvf_opt_config c;
	kvf_opt *o = NULL;
	kvf_store *st;
	uint64_t t = 0, steps;
	int round;

	cr_assert(w.p && w.m && w.v && g && out && want);
	st = open_one_stripe();
	kvf_opt_config_init(&c, KVF_OPT_ADAM);
	for (uint32_t i = 0; i < OPTIM_N; i++)
		w.p[i] = urand(&rng);
	kvc_optim_state_init(&c, w.m, w.v, OPTIM_N);
	cr_assert(eq(int, kvf_opt_create(st, "w", OPTIM_N, &c, w.p, &o), KVF_OK),
		  "%s", kvf_last_error());

	both_step(o, &w, &c, &rng, g, out, want);
	cr_assert(eq(int, kvf_opt_steps(o, &steps, NULL), KVF_OK));
	cr_assert(eq(u64, steps, 1));

	/* KV trickles in until the cleaner copies pages: the oldest partly
	 * filled segments are the two generations' last ones */
	cr_assert(eq(int, kvf_seq_create(st, 1), KVF_OK));
	for (round = 0; round < 2000 && s.cleaner_bytes == 0; round++) {
		cr_assert(eq(int, append(st, 1, 1, t, 5), KVF_OK), "round %d: %s",
			  round, kvf_last_error());
		t += 5;
		cr_assert(eq(int, kvf_sync(st), KVF_OK), "round %d: %s", round,
			  kvf_last_error());
		cr_assert(eq(int, kvf_stats_get(st, &s), KVF_OK));
	}
	cr_assert(s.segments_cleaned > (0), "the cleaner never ran");
	cr_assert(ge(u64, s.cleaner_bytes, 6 * 4096));
	check(st, 1, 1, t);
	cr_assert(eq(int, kvf_opt_close(o), KVF_OK));
	cr_assert(eq(int, kvf_close(st), KVF_OK), "%s", kvf_last_error());

	/* a cleaner's record holds those six pages as one run; no other
	 * optimizer page was in a segment it could take */
	{
		char *store = strdup(fx.path);

		cr_assert(eq(int, catalog_open(tmp_path(store, "meta"), 0, 1,
					       CATALOG_FSYNC, &cat), KVF_OK));
		free(store);
	}
	cr_assert(eq(int, catalog_scan(cat, &tag, 1, find_cleaned_optim_run, &f),
		     KVF_OK));
	catalog_close(cat);
	cr_assert(eq(u32, f.n_max, 6),
		  "longest optimizer run the cleaner wrote: %u", f.n_max);

	st = NULL;
	cr_assert(eq(int, kvf_open(fx.path, NULL, &st), KVF_OK), "%s",
		  kvf_last_error());
	cr_assert(eq(int, kvf_opt_open(st, "w", &o), KVF_OK), "%s",
		  kvf_last_error());
	both_step(o, &w, &c, &rng, g, out, want);
	cr_assert(eq(int, kvf_opt_read(o, 0, OPTIM_N, out), KVF_OK));
	cr_assert(eq(int, memcmp(out, w.p, OPTIM_N * sizeof(float)), 0));
	check(st, 1, 1, t);
	cr_assert(eq(int, kvf_opt_close(o), KVF_OK));
	cr_assert(eq(int, kvf_close(st), KVF_OK));
	free(w.p);
	free(w.m);
	free(w.v);
	free(g);
	free(out);
	free(want);
}

/*
 * A step needs free segments for a whole generation at once.  When they
 * are not free yet, but would be after cleaning (here: the segments of a
 * freed sequence, which become free at the next durable point), the step
 * has the cleaner run and tries again instead of failing; so does a
 * create.
 */
Test(cleaner, a_step_waits_for_the_cleaner)
{
	enum { NP = 30 * 1024 }; /* Adam: 90 pages, 3 segments a stripe */
	kvf_store *st = open_tiny(40 * 64 * 1024);
	static float init[NP], g[NP], back[NP];
	kvf_grad gr = { .dtype = KVF_DTYPE_F32, .values = g, .n = NP };
	kvf_segment_info si = { .struct_size = sizeof(si) };
	uint64_t rng = rng_seed("cleaner step waits"), t = 0, steps;
	uint32_t free0 = 0;
	kvf_opt_config c;
	kvf_opt *o;

	kvf_opt_config_init(&c, KVF_OPT_ADAM);
	for (int i = 0; i < NP; i++) {
		init[i] = urand(&rng);
		g[i] = urand(&rng);
	}
	cr_assert(eq(int, kvf_opt_create(st, "w", NP, &c, init, &o), KVF_OK),
		  "%s", kvf_last_error());
	/* KV fills what is left, then its sequence is freed */
	cr_assert(eq(int, kvf_seq_create(st, 1), KVF_OK));
	while (append(st, 1, 1, t, 32) == KVF_OK)
		t += 32;
	cr_assert(eq(int, kvf_seq_free(st, 1), KVF_OK));
	for (uint32_t seg = 0; seg < 40; seg += 2) /* stripe 0 */
		if (kvf_segment_info_get(st, seg, &si) == KVF_OK &&
		    si.state == KVF_SEG_FREE)
			free0++;
	cr_assert(lt(u32, free0, 4), "%u segments of stripe 0 free already", free0);
	cr_assert(eq(int, kvf_opt_step(o, &gr, NULL), KVF_OK), "%s",
		  kvf_last_error());
	cr_assert(eq(int, kvf_opt_steps(o, &steps, NULL), KVF_OK));
	cr_assert(eq(u64, steps, 1));
	cr_assert(eq(int, kvf_opt_read(o, 0, NP, back), KVF_OK));
	cr_assert(ne(int, memcmp(back, init, sizeof(back)), 0));
	kvf_opt_close(o);
	/* the same for a create, once the step's old generation is gone */
	cr_assert(eq(int, kvf_opt_free(st, "w"), KVF_OK));
	cr_assert(eq(int, kvf_seq_create(st, 2), KVF_OK));
	for (t = 0; append(st, 2, 2, t, 32) == KVF_OK; t += 32)
		;
	cr_assert(eq(int, kvf_seq_free(st, 2), KVF_OK));
	free0 = 0;
	for (uint32_t seg = 0; seg < 40; seg += 2)
		if (kvf_segment_info_get(st, seg, &si) == KVF_OK &&
		    si.state == KVF_SEG_FREE)
			free0++;
	cr_assert(lt(u32, free0, 4), "%u segments of stripe 0 free already", free0);
	cr_assert(eq(int, kvf_opt_create(st, "w2", NP, &c, init, &o), KVF_OK),
		  "%s", kvf_last_error());
	cr_assert(eq(int, kvf_opt_read(o, 0, NP, back), KVF_OK));
	cr_assert(eq(int, memcmp(back, init, sizeof(back)), 0));
	kvf_opt_close(o);
	cr_assert(eq(int, kvf_close(st), KVF_OK));
}

/*
 * Many small tensors: every optimizer create and step leaves its last
 * segment on each stripe partly filled, with every page live.  The
 * cleaner compacts such segments too, so thirty one-chunk optimizers,
 * each stepped twice, fit a store of forty segments (their state is 180
 * pages of its 600).
 */
Test(cleaner, compacts_partly_filled_live_segments)
{
	enum { NOPTIM = 30, NP = 1024 }; /* one chunk: 3 pages of state */
	kvf_store *st = open_tiny(40 * 64 * 1024);
	static float init[NOPTIM][NP], g[NP], back[NP], want[NP];
	kvf_grad gr = { .dtype = KVF_DTYPE_F32, .values = g, .n = NP };
	kvf_opt *o[NOPTIM];
	kvf_opt_config c;
	kvf_stats s = { .struct_size = sizeof(s) };
	uint64_t rng = rng_seed("cleaner partly filled live");

	kvf_opt_config_init(&c, KVF_OPT_ADAM);
	for (int i = 0; i < NP; i++)
		g[i] = urand(&rng);
	for (int k = 0; k < NOPTIM; k++) {
		char name[8];

		for (int i = 0; i < NP; i++)
			init[k][i] = urand(&rng);
		snprintf(name, sizeof(name), "o%d", k);
		cr_assert(eq(int, kvf_opt_create(st, name, NP, &c, init[k], &o[k]),
			     KVF_OK), "create %d: %s", k, kvf_last_error());
	}
	for (int round = 0; round < 2; round++)
		for (int k = 0; k < NOPTIM; k++)
			cr_assert(eq(int, kvf_opt_step(o[k], &gr, NULL), KVF_OK),
				  "round %d optimizer %d: %s", round, k,
				  kvf_last_error());
	cr_assert(eq(int, kvf_stats_get(st, &s), KVF_OK));
	cr_assert(s.segments_cleaned > (0));
	for (int k = 0; k < NOPTIM; k++) {
		struct optim_twin w = { init[k], calloc(NP, 4), calloc(NP, 4), 0 };

		cr_assert(w.m && w.v);
		for (int round = 0; round < 2; round++) { /* in place: init[k] */
			struct kvc_optim_step s2;

			kvc_optim_step_prepare(&s2, &c, ++w.t, 1.0f);
			kvc_optim_dense(kvc_optim(), &s2, w.p, w.m, w.v, NP, g,
					KVF_DTYPE_F32, want);
		}
		cr_assert(eq(int, kvf_opt_read(o[k], 0, NP, back), KVF_OK));
		cr_assert(eq(int, memcmp(back, want, sizeof(back)), 0),
			  "optimizer %d", k);
		free(w.m);
		free(w.v);
		kvf_opt_close(o[k]);
	}
	cr_assert(eq(int, kvf_close(st), KVF_OK));
}

/* Sequences of 3 token groups a stream, each synced alone: a sync leaves
 * each one's pages in a segment of their own, less than half full, and
 * the cleaner pairs such segments.  When its cost-benefit pick (the older,
 * fuller segments first) leaves no room for a second victim, it takes the
 * fewest live pages first: the store fills to about 3/4 of its data
 * pages before KVF_ENOSPC (0.738 to 0.76 from run to run: the writers'
 * timing decides which segments are open when it runs), where it stopped
 * at 0.64, every token readable. */
Test(cleaner, pairs_half_empty_segments_when_the_oldest_cannot_pair)
{
	kvf_model m = { LAYERS, KVH, KVH, DIM, KVF_DTYPE_F16 };
	kvf_options o = fx_options_for(&m, 256 * 1024, 8ull << 20, 1);
	kvf_stats s = { .struct_size = sizeof(s) };
	kvf_status rc = KVF_OK;
	kvf_store *st;
	uint64_t n = 0;

	o.n_threads = 2;
	OK(kvf_open(fx.path, &o, &st));
	while (rc == KVF_OK && n < 400) {
		OK(kvf_seq_create(st, n + 1));
		for (uint32_t l = 0; l < LAYERS && rc == KVF_OK; l++)
			rc = fx_append(st, n + 1, n + 1, l, 0, 3 * G);
		if (rc == KVF_OK)
			rc = kvf_sync(st);
		n += rc == KVF_OK;
	}
	cr_assert(eq(int, rc, KVF_ENOSPC), "%s", kvf_last_error());
	OK(kvf_stats_get(st, &s));
	cr_assert(s.live_share >= 0.70, "refused at %.3f of the data pages live",
		  s.live_share);
	for (uint64_t q = 1; q <= n; q++)
		for (uint32_t l = 0; l < LAYERS; l++)
			fx_check_tokens(st, q, q, l, 0, 3 * G);
	OK(kvf_close(st));
}

/* Asked for free segments that are free already, the cleaner has nothing
 * to do, and says so with KVF_OK (not "no segment to free"); asked for
 * more than there can be, it says KVF_ENOSPC. */
Test(cleaner, nothing_to_do_is_not_a_failure)
{
	kvf_store *st = open_tiny(40 * 64 * 1024);

	cr_assert(eq(int, cleaner_run(st, 1), KVF_OK), "%s", kvf_last_error());
	cr_assert(eq(int, cleaner_run(st, 100), KVF_ENOSPC));
	cr_assert(ne(ptr, strstr(kvf_last_error(), "no segment to free"), NULL),
		  "%s", kvf_last_error());
	cr_assert(eq(int, kvf_close(st), KVF_OK));
}
