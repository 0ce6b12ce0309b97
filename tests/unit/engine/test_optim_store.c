/*
 * test_optim_store.c - optimizer state kept in the store: every step
 * through the store gives the bits the kernels give on plain arrays (the
 * kernels themselves are checked against PyTorch's formulas in
 * unit_compute), across chunk boundaries, sparse gradients, out dtypes, a
 * reopen, and a step cut short (the state stays at the previous step);
 * and every bad input is refused with nothing changed.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/alloc.h"
#include "compute/optim.h"
#include "engine/base/catalog.h"
#include "engine/base/meta.h"
#include "engine/base/store_state.h"
#include "kvflash.h"
#include "store_fixture.h"
#include "testutil.h"

#define N 5000 /* params: four full 1024-value chunks and a partial one */

TestSuite(optim_store, .init = fx_setup_dir, .fini = fx_teardown, .timeout = 120);

static kvf_store *open_store(int create)
{
	kvf_model m = { 1, 1, 1, 64, KVF_DTYPE_F16 };
	kvf_options o;
	kvf_store *st = NULL;

	o = fx_options_for(&m, 128 * 1024, 64ull << 20, 2);
	cr_assert(eq(int, kvf_open(fx.path, create ? &o : NULL, &st), KVF_OK),
		  "%s", kvf_last_error());
	return st;
}

static float frand(uint64_t *rng)
{
	return (float)((double)(rng_next(rng) >> 11) / 9007199254740992.0 * 2 - 1);
}

/* the reference: the same kernels on whole arrays */
struct ref {
	float p[N], m[N], v[N];
	uint64_t t;
};

static void ref_init(struct ref *r, const kvf_opt_config *c, const float *init)
{
	memcpy(r->p, init, sizeof(r->p));
	kvc_optim_state_init(c, r->m, r->v, N);
	r->t = 0;
}

static void ref_step(struct ref *r, const kvf_opt_config *c, const float *g,
		     float *out)
{
	struct kvc_optim_step s;
	unsigned st = kvc_optim_states(c);

	kvc_optim_step_prepare(&s, c, ++r->t, 1.0f);
	kvc_optim_dense(kvc_optim(), &s, r->p, st & KVC_OPTIM_M ? r->m : NULL,
			st & KVC_OPTIM_V ? r->v : NULL, N, g, KVF_DTYPE_F32,
			out);
}

/* run_rule - four steps of rule kind (SGD with Nesterov momentum unless
 * plain), checked against the reference, a reopen halfway; kvf_verify
 * finds every page the rule keeps, and no hole in the states it does not
 * keep (it named them missing for plain SGD) */
static void run_rule(kvf_opt_kind kind, int sparse, int plain)
{
	static struct ref r;
	kvf_store *st = open_store(1);
	uint64_t rng = rng_seed("optim_store");
	static float init[N], g[N], out[N], ref_out[N], back[N];
	static uint32_t idx[N];
	kvf_opt_config c;
	kvf_opt *o = NULL;

	kvf_opt_config_init(&c, kind);
	if (kind == KVF_OPT_SGD && !plain) {
		c.momentum = 0.9f;
		c.nesterov = 1;
	}
	if (kind == KVF_OPT_ADAGRAD)
		c.lr_decay = 0.01f;
	for (int i = 0; i < N; i++)
		init[i] = frand(&rng);
	ref_init(&r, &c, init);
	cr_assert(eq(int, kvf_opt_create(st, "w", N, &c, init, &o), KVF_OK), "%s",
		  kvf_last_error());
	for (int step = 0; step < 4; step++) {
		kvf_grad gr = { .dtype = KVF_DTYPE_F32, .values = g, .n = N };
		uint32_t nnz = 0;

		memset(g, 0, sizeof(g));
		for (int i = 0; i < N; i++)
			if (!sparse || rng_below(&rng, 100) == 0) {
				g[i] = frand(&rng);
				idx[nnz++] = (uint32_t)i;
			}
		if (sparse) { /* the same gradient as indices and values */
			static float vals[N];

			for (uint32_t j = 0; j < nnz; j++)
				vals[j] = g[idx[j]];
			gr = (kvf_grad){ KVF_DTYPE_F32, vals, idx, nnz };
			ref_step(&r, &c, g, ref_out);
			cr_assert(eq(int, kvf_opt_step(o, &gr, out), KVF_OK), "%s",
				  kvf_last_error());
		} else {
			ref_step(&r, &c, g, ref_out);
			cr_assert(eq(int, kvf_opt_step(o, &gr, out), KVF_OK), "%s",
				  kvf_last_error());
		}
		cr_assert(eq(int, memcmp(out, ref_out, sizeof(out)), 0),
			  "step %d: params_out differs", step);
		if (step == 1) { /* the state survives a reopen */
			kvf_opt_close(o);
			kvf_close(st);
			st = open_store(0);
			cr_assert(eq(int, kvf_opt_open(st, "w", &o), KVF_OK), "%s",
				  kvf_last_error());
		}
	}
	cr_assert(eq(int, kvf_opt_read(o, 0, N, back), KVF_OK));
	cr_assert(eq(int, memcmp(back, r.p, sizeof(back)), 0));
	{
		uint64_t steps, n;

		cr_assert(eq(int, kvf_opt_steps(o, &steps, &n), KVF_OK));
		cr_assert(eq(u64, steps, 4));
		cr_assert(eq(u64, n, N));
	}
	{
		kvf_verify_report rep = { .struct_size = sizeof(rep) };

		cr_assert(eq(int, kvf_verify(st, NULL, NULL, &rep), KVF_OK), "%s",
			  kvf_last_error());
		cr_assert(eq(u64, rep.bad_pages, 0), "kvf_verify: %llu bad pages",
			  (unsigned long long)rep.bad_pages);
		cr_assert(rep.pages_checked > 0);
	}
	kvf_opt_close(o);
	kvf_close(st);
}

Test(optim_store, adam_dense) { run_rule(KVF_OPT_ADAM, 0, 0); }
Test(optim_store, adamw_sparse) { run_rule(KVF_OPT_ADAMW, 1, 0); }
Test(optim_store, sgd_nesterov) { run_rule(KVF_OPT_SGD, 0, 0); }
Test(optim_store, sgd_plain) { run_rule(KVF_OPT_SGD, 0, 1); }
Test(optim_store, adagrad_sparse) { run_rule(KVF_OPT_ADAGRAD, 1, 0); }

/* f16 out, clipping and loss scaling go through the same kernels */
Test(optim_store, out_dtype_and_clipping)
{
	kvf_store *st = open_store(1);
	static float init[N], g[N], ref_p[N], m[N], v[N];
	static uint16_t out[N], ref_out[N];
	kvf_opt_config c;
	kvf_opt *o = NULL;
	struct kvc_optim_step s;
	kvf_grad gr = { KVF_DTYPE_F32, g, NULL, N };
	double sumsq = 0;
	uint64_t rng = 5;

	kvf_opt_config_init(&c, KVF_OPT_ADAM);
	c.out_dtype = KVF_DTYPE_F16;
	c.max_grad_norm = 1.0f;
	c.grad_scale = 0.5f;
	for (int i = 0; i < N; i++) {
		init[i] = frand(&rng);
		g[i] = frand(&rng) * 3;
		sumsq += (double)g[i] * g[i];
	}
	memcpy(ref_p, init, sizeof(init));
	kvc_optim_state_init(&c, m, v, N);
	kvc_optim_step_prepare(&s, &c, 1,
			       0.5f * kvc_optim_clip_coef(sqrt(sumsq) * 0.5,
							  1.0));
	kvc_optim_dense(kvc_optim(), &s, ref_p, m, v, N, g, KVF_DTYPE_F32,
			ref_out);
	cr_assert(eq(int, kvf_opt_create(st, "h", N, &c, init, &o), KVF_OK));
	cr_assert(eq(int, kvf_opt_step(o, &gr, out), KVF_OK), "%s", kvf_last_error());
	cr_assert(eq(int, memcmp(out, ref_out, sizeof(out)), 0));
	kvf_opt_close(o);
	kvf_close(st);
}


Test(optim_store, refusals_change_nothing)
{
	kvf_store *st = open_store(1);
	static float init[N], g[N], before[N], after[N];
	uint32_t idx[3] = { 5, 5, 9 };
	kvf_opt_config c;
	kvf_opt *o = NULL, *o2 = NULL;
	kvf_grad gr = { KVF_DTYPE_F32, g, NULL, N };
	char long_name[300];
	uint64_t steps;

	kvf_opt_config_init(&c, KVF_OPT_ADAM);
	for (int i = 0; i < N; i++)
		init[i] = (float)i;
	cr_assert(eq(int, kvf_opt_create(st, "w", N, &c, init, &o), KVF_OK));
	cr_assert(eq(int, kvf_opt_read(o, 0, N, before), KVF_OK));
	gr.n = N - 1;
	EXPECT(kvf_opt_step(o, &gr, NULL), KVF_EINVAL, "has 4999 values");
	gr = (kvf_grad){ KVF_DTYPE_F32, g, idx, 3 };
	EXPECT(kvf_opt_step(o, &gr, NULL), KVF_EINVAL, "must ascend");
	idx[1] = 6;
	idx[2] = N;
	EXPECT(kvf_opt_step(o, &gr, NULL), KVF_ERANGE, "past n_params");
	gr = (kvf_grad){ KVF_DTYPE_F32, g, NULL, N };
	g[77] = NAN;
	EXPECT(kvf_opt_step(o, &gr, NULL), KVF_ERANGE, "NaN or infinity");
	g[77] = INFINITY;
	EXPECT(kvf_opt_step(o, &gr, NULL), KVF_ERANGE, "NaN or infinity");
	g[77] = 0;
	gr.dtype = (kvf_dtype)9;
	EXPECT(kvf_opt_step(o, &gr, NULL), KVF_EINVAL, "not a kvf_dtype");
	EXPECT(kvf_opt_step(o, NULL, NULL), KVF_EINVAL, "grad is NULL");
	cr_assert(eq(int, kvf_opt_read(o, 0, N, after), KVF_OK));
	cr_assert(eq(int, memcmp(before, after, sizeof(after)), 0));
	cr_assert(eq(int, kvf_opt_steps(o, &steps, NULL), KVF_OK));
	cr_assert(eq(u64, steps, 0));
	EXPECT(kvf_opt_read(o, N - 1, 2, after), KVF_ERANGE, "past the 5000 parameters");

	EXPECT(kvf_opt_create(st, "w", N, &c, init, &o2), KVF_EEXIST, "exists already");
	EXPECT(kvf_opt_open(st, "nope", &o2), KVF_ENOENT, "no optimizer called 'nope'");
	cr_assert_null(o2);
	EXPECT(kvf_opt_create(st, "", N, &c, init, &o2), KVF_EINVAL, "name is empty");
	memset(long_name, 'a', sizeof(long_name) - 1);
	long_name[sizeof(long_name) - 1] = '\0';
	EXPECT(kvf_opt_create(st, long_name, N, &c, init, &o2), KVF_EINVAL, "more than 200");
	EXPECT(kvf_opt_create(st, "z", 0, &c, init, &o2), KVF_EINVAL, "n_params 0");
	c.beta1 = 1.0f;
	EXPECT(kvf_opt_create(st, "z", N, &c, init, &o2), KVF_EINVAL, "beta");
	kvf_opt_config_init(&c, KVF_OPT_ADAM);
	EXPECT(kvf_opt_free(st, "w"), KVF_EBUSY, "open handle");
	kvf_opt_close(o);
	cr_assert(eq(int, kvf_opt_free(st, "w"), KVF_OK), "%s", kvf_last_error());
	EXPECT(kvf_opt_open(st, "w", &o2), KVF_ENOENT, "no optimizer");
	EXPECT(kvf_opt_free(st, "w"), KVF_ENOENT, "no optimizer");
	/* optimizer state is no sequence of the caller's: every id stays
	 * free, and none shows in the list */
	cr_assert(eq(int, kvf_opt_create(st, "v", N, &c, init, &o), KVF_OK));
	for (uint64_t id = 0; id < 4; id++)
		cr_assert(eq(int, kvf_seq_create(st, id), KVF_OK), "%s", kvf_last_error());
	{
		uint64_t ids[8];
		size_t n;
		kvf_stats s = { .struct_size = sizeof(s) };

		cr_assert(eq(int, kvf_seq_list(st, ids, 8, &n), KVF_OK));
		cr_assert(eq(sz, n, 4));
		cr_assert(eq(int, kvf_stats_get(st, &s), KVF_OK));
		cr_assert(eq(u64, s.n_sequences, 4));
	}
	cr_assert(eq(int, kvf_seq_free(st, 1), KVF_OK));
	kvf_opt_close(o);
	kvf_close(st);
	st = open_store(0);
	cr_assert(eq(int, kvf_opt_open(st, "v", &o), KVF_OK), "%s", kvf_last_error());
	kvf_opt_close(o);
	kvf_close(st);
}

/* A step whose writes fail part way leaves, after a reopen, the state of
 * the step before it. */
Test(optim_store, step_cut_short)
{
	kvf_store *st = open_store(1);
	static float init[N], g[N], before[N], after[N];
	kvf_opt_config c;
	kvf_opt *o = NULL;
	kvf_grad gr = { KVF_DTYPE_F32, g, NULL, N };
	uint64_t steps, rng = 3;

	kvf_opt_config_init(&c, KVF_OPT_ADAM);
	for (int i = 0; i < N; i++) {
		init[i] = frand(&rng);
		g[i] = frand(&rng);
	}
	cr_assert(eq(int, kvf_opt_create(st, "w", N, &c, init, &o), KVF_OK));
	cr_assert(eq(int, kvf_opt_step(o, &gr, NULL), KVF_OK));
	cr_assert(eq(int, kvf_opt_read(o, 0, N, before), KVF_OK));
	catalog_fail_commits(st->cat, 1000);
	cr_assert(eq(int, kvf_opt_step(o, &gr, NULL), KVF_EFATAL), "%s", kvf_last_error());
	kvf_opt_close(o);
	kvf_close(st);
	st = open_store(0);
	cr_assert(eq(int, kvf_opt_open(st, "w", &o), KVF_OK), "%s", kvf_last_error());
	cr_assert(eq(int, kvf_opt_steps(o, &steps, NULL), KVF_OK));
	cr_assert(eq(u64, steps, 1));
	cr_assert(eq(int, kvf_opt_read(o, 0, N, after), KVF_OK));
	cr_assert(eq(int, memcmp(before, after, sizeof(after)), 0));
	cr_assert(eq(int, kvf_opt_step(o, &gr, NULL), KVF_OK), "%s", kvf_last_error());
	kvf_opt_close(o);
	kvf_close(st);
}

/*
 * Once the store's pools are warm, a step allocates nothing: the work and
 * read buffers, segment buffers with their write jobs and records, the
 * live bitmaps and the catalog batches all exist already.  A warm step
 * makes no allocation call, and with every allocation failing it still
 * succeeds and gives the same bits as a twin stepped normally.  On the
 * memory media (its spares refill each step) and on files.
 */
Test(optim_store, a_warm_step_allocates_nothing)
{
	static const kvf_media_kind kinds[] = { KVF_MEDIA_MEMORY, KVF_MEDIA_FILE };

	for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
		enum { NP = 600 * 1024 }; /* two batches: reads overlap placing */
		kvf_model m = { 1, 1, 1, 64, KVF_DTYPE_F16 };
		uint64_t rng = rng_seed("optim warm step");
		float *g = malloc(NP * sizeof(float)), *a = malloc(NP * sizeof(float)),
		      *b = malloc(NP * sizeof(float));
		kvf_opt *oa, *ob;
		kvf_opt_config c;
		kvf_options o;
		kvf_store *st = NULL;
		char name[16];
		kvf_grad gr = { .dtype = KVF_DTYPE_F32, .values = g, .n = NP };

		cr_assert(g && a && b);
		kvf_options_init(&o, &m);
		o.media = kinds[k];
		o.segment_size = 128 * 1024;
		o.capacity_bytes = 64ull << 20;
		snprintf(name, sizeof(name), "warm%zu", k);
		cr_assert(eq(int, kvf_open(tmp_path(fx.dir, name), &o, &st), KVF_OK), "%s",
			  kvf_last_error());
		kvf_opt_config_init(&c, KVF_OPT_ADAMW);
		cr_assert(eq(int, kvf_opt_create(st, "a", NP, &c, NULL, &oa), KVF_OK));
		cr_assert(eq(int, kvf_opt_create(st, "b", NP, &c, NULL, &ob), KVF_OK));
		for (int s = 0; s < 4; s++) {
			for (uint32_t i = 0; i < NP; i++)
				g[i] = frand(&rng);
			cr_assert(eq(int, kvf_opt_step(ob, &gr, NULL), KVF_OK));
			uint64_t calls = kvf_alloc_calls();

			if (s == 3)
				kvf_alloc_fail_at(1, 1); /* every allocation from here */
			cr_assert(eq(int, kvf_opt_step(oa, &gr, NULL), KVF_OK),
				  "%s step %d: %s", kinds[k] == KVF_MEDIA_MEMORY ? "memory" : "file",
				  s, kvf_last_error());
			kvf_alloc_fail_at(0, 0);
			if (s == 3)
				cr_assert(eq(u64, kvf_alloc_calls() - calls, 0),
					  "a warm step made %llu allocation calls",
					  (unsigned long long)(kvf_alloc_calls() - calls));
		}
		cr_assert(eq(int, kvf_opt_read(oa, 0, NP, a), KVF_OK));
		cr_assert(eq(int, kvf_opt_read(ob, 0, NP, b), KVF_OK));
		cr_assert(eq(int, memcmp(a, b, NP * sizeof(float)), 0));
		kvf_opt_close(oa);
		kvf_opt_close(ob);
		cr_assert(eq(int, kvf_close(st), KVF_OK));
		free(g);
		free(a);
		free(b);
	}
}

struct run_count {
	uint64_t runs, pages; /* of the optimizer's sequence */
	uint32_t most;        /* its runs in one record, at most */
};

static int count_runs(void *arg, const void *key, size_t klen,
		      const void *val, size_t vlen)
{
	struct run_count *c = arg;
	struct meta_seg rec;
	uint32_t here = 0;

	(void)key;
	(void)klen;
	memcpy(&rec, val, sizeof(rec));
	cr_assert(eq(sz, vlen, sizeof(rec) + rec.n_runs * sizeof(struct meta_run)));
	for (uint32_t i = 0; i < rec.n_runs; i++) {
		struct meta_run r;

		memcpy(&r, (const char *)val + sizeof(rec) + i * sizeof(r), sizeof(r));
		if (r.ns != SEQ_NS_OPTIM)
			continue;
		c->runs++;
		c->pages += r.n;
		here++;
	}
	c->most = here > c->most ? here : c->most;
	return 0;
}

/* The segment records of an optimizer on two stripes are runs: a state's
 * chunks alternate stripes, so each stripe's pages hold every second
 * chunk, one run per state and batch in a segment rather than one entry
 * per page. */
Test(optim_store, segment_records_are_runs)
{
	enum { NP = 1024 * 600 }; /* 600 chunks of each state */
	float *init = calloc(NP, sizeof(float));
	struct run_count c = { 0 };
	struct catalog *cat = NULL;
	unsigned char tag = META_TAG_SEG;
	kvf_opt_config cfg;
	kvf_store *st = open_store(1);
	kvf_opt *o = NULL;

	cr_assert_not_null(init);
	kvf_opt_config_init(&cfg, KVF_OPT_ADAM);
	cr_assert(eq(int, kvf_opt_create(st, "w", NP, &cfg, init, &o), KVF_OK),
		  "%s", kvf_last_error());
	kvf_opt_close(o);
	cr_assert(eq(int, kvf_close(st), KVF_OK));
	cr_assert(eq(int, catalog_open(tmp_path(fx.dir, "s/meta"), 0, 1, CATALOG_FSYNC,
				       &cat), KVF_OK));
	cr_assert(eq(int, catalog_scan(cat, &tag, 1, count_runs, &c), KVF_OK));
	catalog_close(cat);
	cr_assert(eq(u64, c.pages, 3 * 600));
	/* 31 data pages a segment: a segment holds at most the tails of two
	 * states' runs and one whole run between */
	cr_assert(le(u32, c.most, 3), "a record of %u runs", c.most);
	cr_assert(le(u64, c.runs * 10, c.pages), "%llu runs for %llu pages",
		  (unsigned long long)c.runs, (unsigned long long)c.pages);
	free(init);
}

/* A step needs room for a whole new generation beside the committed one:
 * in a store that holds one, the step is refused with KVF_ENOSPC once
 * the cleaner has found nothing to free, says so under its own name and
 * the optimizer's, and changes nothing. */
Test(optim_store, step_without_room)
{
	enum { NP = 1024 * 100 }; /* 300 pages of state: 5 segments a stripe */
	kvf_model m = { 1, 1, 1, 64, KVF_DTYPE_F16 };
	static float init[NP], g[NP], back[NP];
	kvf_grad gr = { .dtype = KVF_DTYPE_F32, .values = g, .n = NP };
	uint64_t rng = rng_seed("optim no room"), steps;
	kvf_opt_config cfg;
	kvf_options o;
	kvf_store *st = NULL;
	kvf_opt *optim = NULL;

	o = fx_options_for(&m, 128 * 1024, 16 * 128 * 1024, 2);
	cr_assert(eq(int, kvf_open(fx.path, &o, &st), KVF_OK), "%s",
		  kvf_last_error());
	for (int i = 0; i < NP; i++) {
		init[i] = frand(&rng);
		g[i] = frand(&rng);
	}
	kvf_opt_config_init(&cfg, KVF_OPT_ADAM);
	cr_assert(eq(int, kvf_opt_create(st, "w", NP, &cfg, init, &optim), KVF_OK),
		  "%s", kvf_last_error());
	cr_assert(eq(int, kvf_opt_step(optim, &gr, NULL), KVF_ENOSPC), "%s",
		  kvf_last_error());
	cr_assert(eq(str, (char *)kvf_last_error(),
		     "kvf_opt_step: optimizer 'w': the store is full of live data (16 segments; this needs 5 free on a stripe, and cleaning freed none); free sequences or optimizers and retry"));
	cr_assert(eq(int, kvf_opt_steps(optim, &steps, NULL), KVF_OK));
	cr_assert(eq(u64, steps, 0));
	cr_assert(eq(int, kvf_opt_read(optim, 0, NP, back), KVF_OK));
	cr_assert(eq(int, memcmp(back, init, sizeof(back)), 0));
	kvf_opt_close(optim);
	cr_assert(eq(int, kvf_close(st), KVF_OK));
}

/* A damaged page of the state on file: the step that reads it is refused
 * with KVF_ECORRUPT naming where it lies, and changes nothing (the params
 * read back as before, the step count stays). */
Test(optim_store, damaged_state_page)
{
	kvf_store *st = open_store(1);
	static float init[N], g[N], back[N];
	kvf_grad gr = { KVF_DTYPE_F32, g, NULL, N };
	uint64_t steps, rng = rng_seed("optim damaged page");
	unsigned char page[4096];
	kvf_opt_config c;
	kvf_opt *o = NULL;
	int hits = 0;

	kvf_opt_config_init(&c, KVF_OPT_SGD);
	c.momentum = 0.5f;
	for (int i = 0; i < N; i++) {
		init[i] = frand(&rng);
		g[i] = frand(&rng);
	}
	cr_assert(eq(int, kvf_opt_create(st, "w", N, &c, init, &o), KVF_OK));
	kvf_opt_close(o);
	kvf_close(st);
	/* flip a byte of the page holding params chunk 2, wherever it is */
	for (int f = 0; f < 2; f++) {
		char name[32];
		int fd;

		snprintf(name, sizeof(name), "s/stripe-%03d.kvf", f);
		fd = open(tmp_path(fx.dir, name), O_RDWR);
		cr_assert(fd >= 0);
		for (off_t off = 0; pread(fd, page, sizeof(page), off) == sizeof(page);
		     off += sizeof(page))
			if (memcmp(page, init + 2 * 1024, sizeof(page)) == 0) {
				page[100] ^= 1;
				cr_assert(eq(int, (int)pwrite(fd, page, sizeof(page), off),
					     (int)sizeof(page)));
				hits++;
			}
		close(fd);
	}
	cr_assert(eq(int, hits, 1));
	st = open_store(0);
	cr_assert(eq(int, kvf_opt_open(st, "w", &o), KVF_OK), "%s", kvf_last_error());
	cr_assert(eq(int, kvf_opt_step(o, &gr, NULL), KVF_ECORRUPT), "%s",
		  kvf_last_error());
	cr_assert(eq(int, strncmp(kvf_last_error(), "kvf_opt_step: read: segment ", 28), 0),
		  "%s", kvf_last_error());
	cr_assert(ne(ptr, strstr(kvf_last_error(), "checksum mismatch"), NULL), "%s",
		  kvf_last_error());
	cr_assert(eq(int, kvf_opt_steps(o, &steps, NULL), KVF_OK));
	cr_assert(eq(u64, steps, 0));
	cr_assert(eq(int, kvf_opt_read(o, 0, 2 * 1024, back), KVF_OK));
	cr_assert(eq(int, memcmp(back, init, 2 * 1024 * sizeof(float)), 0));
	kvf_opt_close(o);
	kvf_close(st);
}
