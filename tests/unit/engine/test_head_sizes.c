/*
 * test_head_sizes.c - every head size (kvflash.h, "Head sizes"; the token
 * groups of docs/store.md): the group rule for 1..1024 elements in every
 * dtype at every page size; a round trip through a store for each of
 * them at 4 KiB and 64 KiB pages; for the head sizes of real models (48,
 * 80, 96, 112, 192, 256, in f16 and f32, groups of one page and of
 * several) the engine against a double reference: dense, batch,
 * multi-query and SparF attention (both modes), scores, top-k and H2O,
 * the memory tier on and off, a reopen, a fork, prefix reuse and
 * export/import.  And a store of format 3 (the header before it stated
 * its token group) opens, reads the same and grows.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include "engine/base/catalog.h"
#include "engine/base/meta.h"
#include "engine/base/segfmt.h"
#include "kvflash.h"
#include "store_fixture.h"
#include "testutil.h"

TestSuite(head_sizes, .init = fx_setup_dir, .fini = fx_teardown,
	  .timeout = 300);

static const kvf_dtype dtypes[] = { KVF_DTYPE_F16, KVF_DTYPE_BF16,
				    KVF_DTYPE_F32 };

/* ---- the rule ------------------------------------------------------------- */

/* waste_ok - P pages of page bytes holding G rows leave at most 3 % */
static int waste_ok(uint32_t page, uint32_t p, uint64_t bytes)
{
	uint64_t room = (uint64_t)p * page;

	return bytes <= room && (room - bytes) * 100 <= room * 3;
}

Test(head_sizes, rule_for_every_head_dtype_and_page)
{
	for (uint32_t page = 4096; page <= 65536; page *= 2)
		for (size_t d = 0; d < 3; d++)
			for (uint32_t hd = 1; hd <= KVF_HEAD_DIM_MAX; hd++) {
				uint32_t row = hd * (uint32_t)fx_elt_size(dtypes[d]);
				struct group_geom g = group_layout(page, row);

				cr_assert(ge(u32, g.tokens, 1));
				cr_assert(eq(u64, g.bytes, (uint64_t)g.tokens * row));
				cr_assert(waste_ok(page, g.pages, g.bytes),
					  "head_dim %u dtype %zu page %u: %u tokens in %u pages",
					  hd, d, page, g.tokens, g.pages);
				/* the fewest pages that can */
				for (uint32_t p = 1; p < g.pages; p++)
					cr_assert(eq(int, waste_ok(page, p, (uint64_t)p * page / row * row), 0),
						  "head_dim %u page %u: %u pages would do",
						  hd, page, p);
				/* a row that divides the page keeps format 3's group */
				if (page % row == 0) {
					cr_assert(eq(u32, g.tokens, page / row));
					cr_assert(eq(u32, g.pages, 1));
				}
			}
	/* the examples of kvflash.h */
	cr_assert(eq(u32, group_layout(4096, 256).tokens, 16));
	cr_assert(eq(u32, group_layout(4096, 160).tokens, 25));
	cr_assert(eq(u32, group_layout(4096, 384).pages, 2));
	cr_assert(eq(u32, group_layout(4096, 384).tokens, 21));
}

/* ---- a round trip for every head size -------------------------------------- */

/* fill - n bytes of rng's stream at p */
static void fill(uint64_t *rng, unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)(rng_next(rng) >> 56);
}

/* round_trip - a memory store of one head of hd elements: part of a
 * group, a sync (its partial pages written), then two groups more; every
 * token reads back bit for bit, and the store's group is the rule's */
static void round_trip(const char *dir, kvf_dtype dt, uint32_t page,
		       uint32_t hd, uint64_t *rng)
{
	kvf_model m = { 1, 1, 1, hd, dt };
	uint32_t row = hd * (uint32_t)fx_elt_size(dt);
	struct group_geom g = group_layout(page, row);
	uint32_t n1 = g.tokens / 2 + 1, n = n1 + 2 * g.tokens;
	unsigned char *k = malloc((size_t)n * row), *v = malloc((size_t)n * row);
	unsigned char *ko = malloc((size_t)n * row), *vo = malloc((size_t)n * row);
	kvf_store_info si = { .struct_size = sizeof(si) };
	const char *path = tmp_path(dir, "sweep");
	kvf_store *st;
	kvf_options o;

	kvf_options_init(&o, &m);
	o.media = KVF_MEDIA_MEMORY;
	o.page_size = page;
	o.segment_size = 1u << 20;
	o.capacity_bytes = 16u << 20;
	o.n_threads = 1;
	fill(rng, k, (size_t)n * row);
	fill(rng, v, (size_t)n * row);
	cr_assert(eq(int, kvf_open(path, &o, &st), KVF_OK),
		  "head_dim %u page %u: %s", hd, page, kvf_last_error());
	cr_assert(eq(int, kvf_store_info_get(st, &si), KVF_OK));
	cr_assert(eq(u32, si.group_tokens, g.tokens), "head_dim %u page %u", hd, page);
	cr_assert(eq(u32, si.group_pages, g.pages), "head_dim %u page %u", hd, page);
	cr_assert(eq(u32, si.group_bytes, g.bytes), "head_dim %u page %u", hd, page);
	cr_assert(waste_ok(page, si.group_pages, si.group_bytes));
	cr_assert(eq(int, kvf_seq_create(st, 1), KVF_OK));
	cr_assert(eq(int, kvf_append(st, 1, 0, n1, k, v), KVF_OK), "%s",
		  kvf_last_error());
	cr_assert(eq(int, kvf_sync(st), KVF_OK));
	cr_assert(eq(int, kvf_append(st, 1, 0, n - n1, k + (size_t)n1 * row,
				     v + (size_t)n1 * row), KVF_OK),
		  "%s", kvf_last_error());
	cr_assert(eq(int, kvf_read(st, 1, 0, 0, 0, n, ko, vo), KVF_OK), "%s",
		  kvf_last_error());
	cr_assert(eq(int, memcmp(k, ko, (size_t)n * row) == 0 &&
				  memcmp(v, vo, (size_t)n * row) == 0, 1),
		  "head_dim %u page %u dtype %d: read back differs", hd, page,
		  (int)dt);
	cr_assert(eq(int, kvf_close(st), KVF_OK));
	fx_rm_tree(path);
	free(k);
	free(v);
	free(ko);
	free(vo);
}

/* sweep - round_trip for every head size.  The stores are memory stores,
 * but each still makes and syncs a catalog: on tmpfs, when there is one,
 * the 1024 of them take a tenth of the time they take on a disk. */
static void sweep(kvf_dtype dt, uint32_t page)
{
	uint64_t rng = rng_seed("head_sizes");
	char shm[] = "/dev/shm/kvf-head-sizes-XXXXXX";
	const char *dir = access("/dev/shm", W_OK) == 0 && mkdtemp(shm) ? shm
									 : fx.dir;

	for (uint32_t hd = 1; hd <= KVF_HEAD_DIM_MAX; hd++)
		round_trip(dir, dt, page, hd, &rng);
	if (dir == shm)
		fx_rm_tree(shm);
}

Test(head_sizes, sweep_f16_4k) { sweep(KVF_DTYPE_F16, 4096); }
Test(head_sizes, sweep_bf16_4k) { sweep(KVF_DTYPE_BF16, 4096); }
Test(head_sizes, sweep_f32_4k) { sweep(KVF_DTYPE_F32, 4096); }
Test(head_sizes, sweep_f16_64k) { sweep(KVF_DTYPE_F16, 65536); }
Test(head_sizes, sweep_bf16_64k) { sweep(KVF_DTYPE_BF16, 65536); }
Test(head_sizes, sweep_f32_64k) { sweep(KVF_DTYPE_F32, 65536); }

#undef G /* store_fixture.h's, for its own head size */

/* ---- the engine for the head sizes of real models ---------------------------- */

#define SH_QH 4
#define SH_KVH 2

/* struct shape_run - a store of one head size and the K/V appended to
 * its sequence 1, kept to check reads bit for bit */
struct shape_run {
	struct attn_fx f;
	uint32_t row;           /* bytes of one token of one head */
	uint32_t GT;             /* tokens of a group */
	uint64_t n;             /* tokens of sequence 1 */
	unsigned char *k[LAYERS], *v[LAYERS]; /* [n][SH_KVH][dim] */
};

/* keep_append - n tokens of random K and V to every layer of seq, kept
 * from token t0 of r's copies (NULL: not kept) */
static void keep_append(struct shape_run *r, uint64_t seq, uint64_t t0,
			uint32_t n, int keep)
{
	size_t cnt = (size_t)n * SH_KVH * r->f.dim, eb = fx_elt_size(r->f.dt);
	unsigned char *k = malloc(cnt * eb + 4), *v = malloc(cnt * eb + 4);

	for (uint32_t l = 0; l < LAYERS; l++) {
		for (size_t i = 0; i < cnt; i++) {
			fx_put_f(r->f.dt, k, i, fx_urand(&r->f.rng));
			fx_put_f(r->f.dt, v, i, fx_urand(&r->f.rng));
		}
		cr_assert(eq(int, kvf_append(r->f.st, seq, l, n, k, v), KVF_OK),
			  "%s", kvf_last_error());
		if (keep) {
			memcpy(r->k[l] + t0 * SH_KVH * r->row, k, cnt * eb);
			memcpy(r->v[l] + t0 * SH_KVH * r->row, v, cnt * eb);
		}
	}
	free(k);
	free(v);
}

/* reads_same - kvf_read of seq's tokens [0, n) of every layer and head
 * equals the kept rows [0, n) (of r->k/v, or of k/v when given) */
static void reads_same(struct shape_run *r, kvf_store *st, uint64_t seq,
		       uint64_t n, const char *what)
{
	unsigned char *ko = malloc(n * r->row + 1), *vo = malloc(n * r->row + 1);

	for (uint32_t l = 0; l < LAYERS; l++)
		for (uint32_t h = 0; h < SH_KVH; h++) {
			cr_assert(eq(int, kvf_read(st, seq, l, h, 0, n, ko, vo),
				     KVF_OK), "%s: %s", what, kvf_last_error());
			for (uint64_t t = 0; t < n; t++) {
				size_t at = (t * SH_KVH + h) * r->row;

				cr_assert(eq(int, memcmp(ko + t * r->row,
							 r->k[l] + at, r->row), 0),
					  "%s: K layer %u head %u token %llu",
					  what, l, h, (unsigned long long)t);
				cr_assert(eq(int, memcmp(vo + t * r->row,
							 r->v[l] + at, r->row), 0),
					  "%s: V layer %u head %u token %llu",
					  what, l, h, (unsigned long long)t);
			}
		}
	free(ko);
	free(vo);
}

/* dense_ok - kvf_attend (default scale: 1/sqrt(the real head_dim)) of
 * seq equals the double reference; the output into out */
static void dense_ok(struct shape_run *r, uint64_t seq, const float *q,
		     float *out)
{
	uint32_t D = r->f.dim;
	double *rout = malloc(SH_QH * D * sizeof(double)), rlse[SH_QH];
	float lse[SH_QH];
	kvf_attn_opts o;

	kvf_attn_opts_init(&o);
	o.lse = lse;
	cr_assert(eq(int, kvf_attend(r->f.st, seq, 1, q, out, &o), KVF_OK),
		  "%s", kvf_last_error());
	fx_attn_reference(&r->f, seq, 1, q, 1.0f / sqrtf((float)D), NULL, 0,
			  rout, rlse, NULL);
	fx_check_close(out, rout, SH_QH * D, 2e-5, "dense");
	for (uint32_t h = 0; h < SH_QH; h++)
		cr_assert(le(dbl, fabs(lse[h] - rlse[h]), 1e-4), "lse[%u]", h);
	free(rout);
}

static void engine_for(uint32_t dim, kvf_dtype dt)
{
	struct shape_run r = { 0 };
	uint32_t D = dim, GT;
	uint64_t n, nf;
	float *q, *out, *out2, *qq, *probs;
	double *rout, *rp, rlse[2 * SH_QH];
	uint64_t seqs[2] = { 1, 2 }, pos[2], tok[SH_KVH * 3], n_reused;
	uint32_t n_out[SH_KVH], *ids;
	float mass[SH_KVH * 3];
	uint8_t *mask;
	kvf_attn_opts o;
	kvf_store_info si = { .struct_size = sizeof(si) };
	kvf_store *st2;
	char exp_path[4096];

	r.f = fx_attn_open_shape("s", dt, SH_QH, SH_KVH, dim, 4096, 1);
	r.row = dim * (uint32_t)fx_elt_size(dt);
	cr_assert(eq(int, kvf_store_info_get(r.f.st, &si), KVF_OK));
	GT = r.GT = si.group_tokens;
	cr_assert(waste_ok(4096, si.group_pages, si.group_bytes));
	/* a prefill of two groups and a bit, then decode steps that fill a
	 * third group and go on into a fourth: 3G + 5 tokens */
	n = r.n = 3 * (uint64_t)GT + 5;
	for (uint32_t l = 0; l < LAYERS; l++) {
		r.k[l] = malloc(n * SH_KVH * r.row);
		r.v[l] = malloc(n * SH_KVH * r.row);
	}
	cr_assert(eq(int, kvf_seq_create(r.f.st, 1), KVF_OK));
	keep_append(&r, 1, 0, 2 * GT + 3, 1);
	for (uint64_t t = 2 * GT + 3; t < n; t++)
		keep_append(&r, 1, t, 1, 1);
	reads_same(&r, r.f.st, 1, n, "appended");

	q = malloc(2 * SH_QH * D * sizeof(float));
	out = malloc(2 * SH_QH * D * sizeof(float));
	out2 = malloc(2 * SH_QH * D * sizeof(float));
	rout = malloc(2 * SH_QH * D * sizeof(double));
	rp = malloc(SH_QH * (n + 8) * sizeof(double));
	probs = malloc(SH_QH * (n + 8) * sizeof(float));
	mask = malloc(n + 8);
	for (uint32_t j = 0; j < 2 * SH_QH * D; j++)
		q[j] = fx_urand(&r.f.rng) * 3;
	qq = q + SH_QH * D;

	/* dense, tier on (the default budget) */
	dense_ok(&r, 1, q, out);

	/* SparF with every dim and token, both modes, is dense */
	for (uint32_t mode = 1; mode <= 2; mode++) {
		kvf_attn_opts_init(&o);
		o.sparse = mode;
		o.top_r = D;
		o.top_k = (uint32_t)n;
		cr_assert(eq(int, kvf_attend(r.f.st, 1, 1, q, out2, &o), KVF_OK),
			  "sparse %u: %s", mode, kvf_last_error());
		for (uint32_t j = 0; j < SH_QH * D; j++)
			cr_assert(le(flt, fabsf(out2[j] - out[j]), 2e-5f),
				  "sparse %u [%u]: %g, dense %g", mode, j,
				  (double)out2[j], (double)out[j]);
	}
	/* SparF on an eighth of the tokens reads fewer groups and still
	 * runs (the approximate step reads K^T pages of this head size) */
	kvf_attn_opts_init(&o);
	o.sparse = 2;
	o.top_r = D / 4;
	o.top_k = (uint32_t)(n / 8 + 1);
	cr_assert(eq(int, kvf_attend(r.f.st, 1, 1, q, out2, &o), KVF_OK), "%s",
		  kvf_last_error());

	/* scores, top-k and H2O against the reference probabilities */
	cr_assert(eq(int, kvf_scores(r.f.st, 1, 1, q, NULL, probs, n), KVF_OK),
		  "%s", kvf_last_error());
	fx_attn_reference(&r.f, 1, 1, q, 1.0f / sqrtf((float)D), NULL, 0,
			  rout, rlse, rp);
	fx_check_close(probs, rp, SH_QH * n, 1e-5, "probs");
	cr_assert(eq(int, kvf_topk(r.f.st, 1, 1, q, NULL, 3, tok, mass, n_out),
		     KVF_OK));
	for (uint32_t kh = 0; kh < SH_KVH; kh++) {
		cr_assert(eq(u32, n_out[kh], 3));
		for (int j = 0; j < 3; j++) {
			uint64_t t = tok[kh * 3 + j];
			double m = (rp[(kh * 2) * n + t] + rp[(kh * 2 + 1) * n + t]) / 2;
			int above = 0;

			for (uint64_t u = 0; u < n; u++)
				above += (rp[(kh * 2) * n + u] +
					  rp[(kh * 2 + 1) * n + u]) / 2 > m + 1e-6;
			cr_assert(lt(int, above, 3), "head %u token %llu", kh,
				  (unsigned long long)t);
			cr_assert(le(dbl, fabs(mass[kh * 3 + j] - m), 1e-5));
		}
	}
	kvf_attn_opts_init(&o);
	o.h2o = 1;
	cr_assert(eq(int, kvf_attend(r.f.st, 1, 1, q, out2, &o), KVF_OK));
	cr_assert(eq(int, kvf_h2o_read(r.f.st, 1, 1, 1, 0, n, probs), KVF_OK));
	for (uint64_t t = 0; t < n; t++)
		cr_assert(le(dbl, fabs(probs[t] - (rp[2 * n + t] + rp[3 * n + t])),
			     1e-5), "h2o[%llu]", (unsigned long long)t);

	/* multi-query: query 0 sees tokens up to GT - 1, query 1 all */
	pos[0] = GT - 1;
	pos[1] = n - 1;
	cr_assert(eq(int, kvf_attend_multi(r.f.st, 1, 1, 2, pos, q, out2, NULL),
		     KVF_OK), "%s", kvf_last_error());
	for (uint64_t t = 0; t < n; t++)
		mask[t] = t <= pos[0];
	fx_attn_reference(&r.f, 1, 1, q, 1.0f / sqrtf((float)D), mask, 0, rout,
			  rlse, NULL);
	fx_check_close(out2, rout, SH_QH * D, 2e-5, "multi 0");
	fx_attn_reference(&r.f, 1, 1, qq, 1.0f / sqrtf((float)D), NULL, 0,
			  rout, rlse, NULL);
	fx_check_close(out2 + SH_QH * D, rout, SH_QH * D, 2e-5, "multi 1");

	/* fork inside a group; the child grows on its own; a batch over
	 * parent and child */
	nf = GT + GT / 2 + 1;
	cr_assert(eq(int, kvf_seq_fork(r.f.st, 1, 2, nf), KVF_OK), "%s",
		  kvf_last_error());
	keep_append(&r, 2, 0, 7, 0);
	{
		struct shape_run c = r; /* the child's rows: parent's, then new */
		unsigned char *ko = malloc(7 * r.row), *vo = malloc(7 * r.row);

		reads_same(&c, r.f.st, 2, nf, "fork");
		cr_assert(eq(int, kvf_read(r.f.st, 2, 0, 0, nf, nf + 7, ko, vo),
			     KVF_OK));
		free(ko);
		free(vo);
	}
	reads_same(&r, r.f.st, 1, n, "parent after fork");
	cr_assert(eq(int, kvf_attend_batch(r.f.st, 2, seqs, 1, q, out2, NULL),
		     KVF_OK), "%s", kvf_last_error());
	for (uint32_t i = 0; i < 2; i++) {
		fx_attn_reference(&r.f, seqs[i], 1, q + i * SH_QH * D,
				  1.0f / sqrtf((float)D), NULL, 0, rout, rlse,
				  NULL);
		fx_check_close(out2 + i * SH_QH * D, rout, SH_QH * D, 2e-5,
			       "batch");
	}

	/* prefix reuse: a sequence with token ids, then one whose ids share
	 * a group and a half of them */
	ids = malloc((n + 8) * sizeof(*ids));
	for (uint64_t t = 0; t < n; t++)
		ids[t] = (uint32_t)(t * 7 + 1);
	cr_assert(eq(int, kvf_seq_create_tokens(r.f.st, 10, ids, 2 * GT,
						&n_reused), KVF_OK));
	cr_assert(eq(u64, n_reused, 0));
	{
		struct shape_run p = r;

		for (uint32_t l = 0; l < LAYERS; l++) {
			p.k[l] = malloc(2 * (size_t)GT * SH_KVH * r.row);
			p.v[l] = malloc(2 * (size_t)GT * SH_KVH * r.row);
		}
		keep_append(&p, 10, 0, 2 * GT, 1);
		ids[GT + GT / 2] = 999999; /* the ids part there */
		cr_assert(eq(int, kvf_seq_create_tokens(r.f.st, 11, ids, 2 * GT,
							&n_reused), KVF_OK));
		cr_assert(eq(u64, n_reused, GT + GT / 2), "reused %llu of %u",
			  (unsigned long long)n_reused, GT + GT / 2);
		reads_same(&p, r.f.st, 11, n_reused, "prefix");
		for (uint32_t l = 0; l < LAYERS; l++) {
			free(p.k[l]);
			free(p.v[l]);
		}
	}

	/* export, import into the same store under another id */
	snprintf(exp_path, sizeof(exp_path), "%s", tmp_path(fx.dir, "seq1.kvs"));
	cr_assert(eq(int, kvf_seq_export(r.f.st, 1, exp_path), KVF_OK), "%s",
		  kvf_last_error());
	cr_assert(eq(int, kvf_seq_import(r.f.st, exp_path, 20, NULL), KVF_OK),
		  "%s", kvf_last_error());
	reads_same(&r, r.f.st, 20, n, "imported");

	/* reopen (partial groups come back from media) with the memory tier
	 * off: the same bytes, the same attention bit for bit */
	cr_assert(eq(int, kvf_close(r.f.st), KVF_OK));
	{
		kvf_model m = { LAYERS, SH_QH, SH_KVH, dim, dt };
		kvf_options ro = fx_options_for(&m, 512 * 1024, 256ull << 20, 2);

		ro.kt_pages = 1;
		ro.dram_budget = 0;
		cr_assert(eq(int, kvf_open(tmp_path(fx.dir, "s"), &ro, &st2),
			     KVF_OK), "%s", kvf_last_error());
	}
	r.f.st = st2;
	reads_same(&r, st2, 1, n, "reopened");
	cr_assert(eq(int, kvf_attend(st2, 1, 1, q, out2, NULL), KVF_OK));
	cr_assert(eq(int, memcmp(out, out2, SH_QH * D * sizeof(float)), 0),
		  "attention with the tier off differs");
	/* and it grows on from its tail */
	keep_append(&r, 1, 0, 1, 0);
	cr_assert(eq(int, kvf_close(st2), KVF_OK));

	for (uint32_t l = 0; l < LAYERS; l++) {
		free(r.k[l]);
		free(r.v[l]);
	}
	free(q);
	free(out);
	free(out2);
	free(rout);
	free(rp);
	free(probs);
	free(mask);
	free(ids);
}

Test(head_sizes, engine_48_f16) { engine_for(48, KVF_DTYPE_F16); }
Test(head_sizes, engine_48_f32) { engine_for(48, KVF_DTYPE_F32); }
Test(head_sizes, engine_80_f16) { engine_for(80, KVF_DTYPE_F16); }
Test(head_sizes, engine_80_f32) { engine_for(80, KVF_DTYPE_F32); }
Test(head_sizes, engine_96_f16) { engine_for(96, KVF_DTYPE_F16); }
Test(head_sizes, engine_96_f32) { engine_for(96, KVF_DTYPE_F32); }
Test(head_sizes, engine_112_f16) { engine_for(112, KVF_DTYPE_F16); }
Test(head_sizes, engine_112_f32) { engine_for(112, KVF_DTYPE_F32); }
Test(head_sizes, engine_192_f16) { engine_for(192, KVF_DTYPE_F16); }
Test(head_sizes, engine_192_f32) { engine_for(192, KVF_DTYPE_F32); }
Test(head_sizes, engine_256_f16) { engine_for(256, KVF_DTYPE_F16); }
Test(head_sizes, engine_256_f32) { engine_for(256, KVF_DTYPE_F32); }

/* ---- a store of format 3 ------------------------------------------------- */

/* as_format_3 - make the store at path look as format 3 made it: the
 * header without group fields (format 4 adds nothing else on media), and
 * the catalog's copy of it */
static void as_format_3(const char *path)
{
	struct store_header h;
	struct catalog *c = NULL;
	struct catalog_batch *b = catalog_batch_new();
	unsigned char tag = META_TAG_CONFIG;
	int fd = open(tmp_path(path, STORE_HEADER_FILE), O_RDWR);

	cr_assert(fd >= 0 && b != NULL);
	cr_assert(eq(int, (int)pread(fd, &h, sizeof(h), 0), (int)sizeof(h)));
	cr_assert(eq(u32, h.format_version, 4));
	h.format_version = 3;
	h.group_tokens = h.group_pages = h.group_bytes = h.codec = 0;
	h.checksum = XXH3_64bits(&h, offsetof(struct store_header, checksum));
	cr_assert(eq(int, (int)pwrite(fd, &h, sizeof(h), 0), (int)sizeof(h)));
	close(fd);
	OK(catalog_open(tmp_path(path, "meta"), 0, 0, CATALOG_FSYNC, &c));
	catalog_batch_put(b, &tag, 1, &h, sizeof(h));
	OK(catalog_commit(c, b, 1));
	catalog_batch_free(b);
	catalog_close(c);
}

Test(head_sizes, format_3_store_opens_reads_the_same_and_grows)
{
	struct shape_run r = { 0 };
	kvf_store_info si = { .struct_size = sizeof(si) };
	char path[4096];
	float q[SH_QH * DIM], before[SH_QH * DIM], after[SH_QH * DIM];
	uint64_t n = 2 * 32 + 5;

	r.f = fx_attn_open_shape("old", KVF_DTYPE_F16, SH_QH, SH_KVH, DIM,
				 4096, 0);
	snprintf(path, sizeof(path), "%s", tmp_path(fx.dir, "old"));
	r.row = DIM * 2;
	for (uint32_t l = 0; l < LAYERS; l++) {
		r.k[l] = malloc((n + 3) * SH_KVH * r.row);
		r.v[l] = malloc((n + 3) * SH_KVH * r.row);
	}
	OK(kvf_seq_create(r.f.st, 1));
	keep_append(&r, 1, 0, (uint32_t)n, 1);
	for (uint32_t j = 0; j < SH_QH * DIM; j++)
		q[j] = fx_urand(&r.f.rng);
	OK(kvf_attend(r.f.st, 1, 1, q, before, NULL));
	OK(kvf_close(r.f.st));

	as_format_3(path);
	OK(kvf_open(path, NULL, &r.f.st));
	OK(kvf_store_info_get(r.f.st, &si));
	cr_assert(eq(u32, si.format_version, 3));
	cr_assert(eq(u32, si.group_tokens, 32));
	cr_assert(eq(u32, si.group_pages, 1));
	reads_same(&r, r.f.st, 1, n, "format 3");
	OK(kvf_attend(r.f.st, 1, 1, q, after, NULL));
	cr_assert(eq(int, memcmp(before, after, sizeof(before)), 0));
	/* it grows, and stays format 3 */
	keep_append(&r, 1, n, 3, 1);
	OK(kvf_close(r.f.st));
	OK(kvf_open(path, NULL, &r.f.st));
	OK(kvf_store_info_get(r.f.st, &si));
	cr_assert(eq(u32, si.format_version, 3));
	reads_same(&r, r.f.st, 1, n + 3, "format 3 grown");
	OK(kvf_close(r.f.st));
	for (uint32_t l = 0; l < LAYERS; l++) {
		free(r.k[l]);
		free(r.v[l]);
	}
}

/* ---- groups of several pages: a crash, verify, damage ----------------------- */

#define MP_DIM 192 /* f32: rows of 768 bytes, 16 tokens in 3 pages of 4 KiB */
#define MP_G 16
#define MP_P 3

/* mp_byte - byte i of the row of token t of (layer, kind, head) */
static unsigned char mp_byte(uint32_t layer, int kind, uint64_t t, uint32_t h,
			     uint32_t i)
{
	uint64_t x = (t * 0x9e3779b97f4a7c15ull) ^ (layer * 7919u) ^
		     ((uint64_t)kind << 40) ^ ((uint64_t)h << 48) ^ i;

	x ^= x >> 31;
	x *= 0xbf58476d1ce4e5b9ull;
	return (unsigned char)(x >> 40);
}

static kvf_options mp_opts(void)
{
	kvf_model m = { LAYERS, SH_QH, SH_KVH, MP_DIM, KVF_DTYPE_F32 };
	kvf_options o = fx_options_for(&m, 512 * 1024, 256ull << 20, 2);

	o.n_threads = 2;
	return o;
}

/* mp_append - tokens [t0, t0 + n) of every layer of sequence 1 */
static kvf_status mp_append(kvf_store *st, uint64_t t0, uint32_t n)
{
	size_t row = MP_DIM * 4, per = (size_t)SH_KVH * row;
	unsigned char *k = malloc(n * per), *v = malloc(n * per);
	kvf_status rc = KVF_OK;

	for (uint32_t l = 0; l < LAYERS && rc == KVF_OK; l++) {
		for (uint32_t t = 0; t < n; t++)
			for (uint32_t h = 0; h < SH_KVH; h++)
				for (uint32_t i = 0; i < row; i++) {
					k[t * per + h * row + i] = mp_byte(l, 0, t0 + t, h, i);
					v[t * per + h * row + i] = mp_byte(l, 1, t0 + t, h, i);
				}
		rc = kvf_append(st, 1, l, n, k, v);
	}
	free(k);
	free(v);
	return rc;
}

/* mp_tokens_ok - every token of sequence 1 reads back as mp_byte made it */
static void mp_tokens_ok(kvf_store *st, uint64_t n)
{
	size_t row = MP_DIM * 4;
	unsigned char *k = malloc(n * row + 1), *v = malloc(n * row + 1);

	for (uint32_t l = 0; l < LAYERS; l++)
		for (uint32_t h = 0; h < SH_KVH; h++) {
			OK(kvf_read(st, 1, l, h, 0, n, k, v));
			for (uint64_t t = 0; t < n; t++)
				for (uint32_t i = 0; i < row; i++) {
					cr_assert(eq(u8, k[t * row + i], mp_byte(l, 0, t, h, i)),
						  "K layer %u head %u token %llu", l, h,
						  (unsigned long long)t);
					cr_assert(eq(u8, v[t * row + i], mp_byte(l, 1, t, h, i)),
						  "V layer %u head %u token %llu", l, h,
						  (unsigned long long)t);
				}
		}
	free(k);
	free(v);
}

/* mp_writer - appends of odd sizes, a sync now and then (each reported
 * "S tokens"), and an exit without a close after appends past the last
 * sync: what a killed process leaves */
static void mp_writer(const char *path)
{
	kvf_options o = mp_opts();
	kvf_store *st;
	uint64_t t = 0;
	static const uint32_t step[] = { 5, 1, 40, 1, 1, 29, 70, 3, 1, 64, 17,
						2, 40 };

	CHILD_MUST(kvf_open(path, &o, &st));
	CHILD_MUST(kvf_seq_create(st, 1));
	CHILD_MUST(kvf_sync(st));
	for (size_t i = 0; i < sizeof(step) / sizeof(step[0]); i++) {
		CHILD_MUST(mp_append(st, t, step[i]));
		t += step[i];
		if (i % 3 == 1) {
			CHILD_MUST(kvf_sync(st));
			fx_child_say("S %llu", (unsigned long long)t);
		}
	}
	fx_child_say("A %llu", (unsigned long long)t);
	_exit(0);
}

Test(head_sizes, multi_page_groups_after_a_crash)
{
	char path[4096], line[128];
	unsigned long long synced = 0, appended = 0, x;
	kvf_store_info si = { .struct_size = sizeof(si) };
	kvf_verify_report vr = { .struct_size = sizeof(vr) };
	kvf_options o = mp_opts();
	kvf_store *st;
	uint64_t len;
	int fd, status;
	pid_t pid;

	snprintf(path, sizeof(path), "%s", tmp_path(fx.dir, "mp"));
	pid = fx_spawn(&fd);
	if (pid == 0)
		mp_writer(path);
	while (fx_read_line(fd, line, sizeof(line))) {
		cr_assert(line[0] != 'E', "writer: %s", line);
		if (sscanf(line, "S %llu", &x) == 1)
			synced = x;
		if (sscanf(line, "A %llu", &x) == 1)
			appended = x;
	}
	close(fd);
	cr_assert(eq(int, (int)waitpid(pid, &status, 0), (int)pid));
	cr_assert(eq(int, WIFEXITED(status) && WEXITSTATUS(status) == 0, 1));
	cr_assert(appended > synced && synced > 0, "appended %llu, synced %llu",
		  appended, synced);

	o.dram_budget = 0;
	OK(kvf_open(path, &o, &st));
	OK(kvf_store_info_get(st, &si));
	cr_assert(eq(u32, si.group_pages, MP_P));
	cr_assert(eq(u32, si.group_tokens, MP_G));
	for (uint32_t l = 0; l < LAYERS; l++) {
		OK(kvf_seq_len(st, 1, l, &len));
		cr_assert(len >= synced && len <= appended,
			  "layer %u: %llu tokens, synced %llu, appended %llu", l,
			  (unsigned long long)len, synced, appended);
	}
	OK(kvf_seq_len(st, 1, 0, &len));
	mp_tokens_ok(st, len);
	OK(kvf_verify(st, NULL, NULL, &vr));
	cr_assert(eq(u64, vr.bad_pages, 0));
	/* it grows on from what came back, across groups */
	OK(mp_append(st, len, 70));
	mp_tokens_ok(st, len + 70);
	OK(kvf_close(st));
}

/* keep_damage - kvf_verify's fn: keep the first damage */
static int keep_damage(void *arg, const kvf_verify_damage *d)
{
	kvf_verify_damage *first = arg;

	if (first->struct_size == 0)
		*first = *d;
	return 0;
}

Test(head_sizes, multi_page_groups_verify_and_damage)
{
	char path[4096];
	kvf_verify_report vr = { .struct_size = sizeof(vr) };
	kvf_verify_damage d = { 0 };
	kvf_options o = mp_opts();
	kvf_store *st;
	uint64_t n = 2 * MP_G + 5; /* two groups of 3 pages and a tail of 1 */
	unsigned char k[MP_DIM * 4], v[MP_DIM * 4];
	kvf_status rc;

	snprintf(path, sizeof(path), "%s", tmp_path(fx.dir, "mpv"));
	OK(kvf_open(path, &o, &st));
	OK(kvf_seq_create(st, 1));
	OK(mp_append(st, 0, (uint32_t)n));
	OK(kvf_close(st));
	o.dram_budget = 0;
	OK(kvf_open(path, &o, &st));
	OK(kvf_verify(st, NULL, NULL, &vr));
	cr_assert(eq(u64, vr.bad_pages, 0));
	cr_assert(eq(u64, vr.pages_checked, LAYERS * 2 * SH_KVH * (2 * MP_P + 1)));
	OK(kvf_close(st));

	/* a byte flipped in the first data page of stripe 0 */
	fx_flip(path, 0, 100, 1);
	OK(kvf_open(path, &o, &st));
	OK(kvf_verify(st, keep_damage, &d, &vr));
	cr_assert(eq(u64, vr.bad_pages, 1));
	cr_assert(eq(u64, d.seq, 1));
	cr_assert(d.group < 3, "group %llu", (unsigned long long)d.group);
	cr_assert(d.kind == KVF_KIND_K || d.kind == KVF_KIND_V);
	/* any token of that group is refused, never returned; the groups
	 * around it still read */
	rc = kvf_read(st, 1, d.layer, d.head, d.group * MP_G + MP_G - 1,
		      d.group * MP_G + MP_G, k, v);
	cr_assert(eq(int, rc, KVF_ECORRUPT), "%s", kvf_last_error());
	cr_assert(ne(ptr, strstr(kvf_last_error(), "checksum mismatch"), NULL));
	for (uint64_t g = 0; g < 3; g++)
		if (g != d.group)
			OK(kvf_read(st, 1, d.layer, d.head, g * MP_G,
				    g * MP_G + 1, k, v));
	OK(kvf_close(st));
}

/* newest_log - the catalog's newest write-ahead log in dir/meta */
static void newest_log(const char *dir, char *out, size_t cap)
	__attribute__((nonnull));
static void newest_log(const char *dir, char *out, size_t cap)
{
	char meta[4200], best[256] = "";
	DIR *d;
	struct dirent *e;

	snprintf(meta, sizeof(meta), "%s/meta", dir);
	d = opendir(meta);
	cr_assert_not_null(d);
	while ((e = readdir(d)) != NULL) {
		size_t n = strlen(e->d_name);

		if (n > 4 && n < sizeof(best) && !strcmp(e->d_name + n - 4, ".log") &&
		    strcmp(best, e->d_name) < 0)
			snprintf(best, sizeof(best), "%s", e->d_name);
	}
	closedir(d);
	cr_assert(best[0] != '\0', "no write-ahead log in %s", meta);
	cr_assert(strlen(meta) + strlen(best) + 2 <= cap);
	strcpy(out, meta);
	strcat(out, "/");
	strcat(out, best);
}

/* kvf_repair of a store of 3-page groups whose catalog lost its newest
 * records (its log cut short): the groups the summaries prove whole come
 * back, every token as appended */
Test(head_sizes, multi_page_groups_repair)
{
	char gold[4096], work[4096], cmd[12400], logp[4500];
	kvf_options o = mp_opts();
	kvf_store *st;
	uint64_t t = 0, restored = 0;
	unsigned repaired = 0;
	struct stat sb;

	snprintf(gold, sizeof(gold), "%s", tmp_path(fx.dir, "gold"));
	snprintf(work, sizeof(work), "%s", tmp_path(fx.dir, "work"));
	OK(kvf_open(gold, &o, &st));
	OK(kvf_seq_create(st, 1));
	for (int round = 0; round < 6; round++) {
		uint32_t n = 11 + 9 * (uint32_t)round; /* whole and part groups */

		OK(mp_append(st, t, n));
		t += n;
		OK(kvf_sync(st));
	}
	OK(kvf_close(st));
	for (int cut = 1; cut < 8; cut++) {
		kvf_repair_report r = { .struct_size = sizeof(r) };
		uint64_t len;

		snprintf(cmd, sizeof(cmd), "rm -rf '%s' && cp -a '%s' '%s'", work,
			 gold, work);
		cr_assert(eq(int, system(cmd), 0));
		newest_log(work, logp, sizeof(logp));
		cr_assert(eq(int, stat(logp, &sb), 0));
		cr_assert(eq(int, truncate(logp, sb.st_size * cut / 8), 0));
		if (kvf_open(work, NULL, &st) != KVF_OK) {
			OK(kvf_repair(work, NULL, 0, &r));
			restored += r.tokens_restored;
			repaired++;
			OK(kvf_open(work, NULL, &st));
		}
		OK(kvf_seq_len(st, 1, 0, &len));
		cr_assert(len <= t, "%llu tokens, %llu appended",
			  (unsigned long long)len, (unsigned long long)t);
		mp_tokens_ok(st, len);
		OK(kvf_close(st));
	}
	cr_log_info("multi-page repair: %u repaired, %llu tokens given back",
		    repaired, (unsigned long long)restored);
	cr_assert(repaired > 0 && restored > 0, "repaired %u, restored %llu",
		  repaired, (unsigned long long)restored);
}

/* ---- groups of several pages: truncation ----------------------------------- */

/* mp_entries - index entries of K or V of one head holding n tokens */
static uint64_t mp_entries(uint64_t n)
{
	return n / MP_G * MP_P + (n % MP_G * MP_DIM * 4 + 4095) / 4096;
}

/* mp_cut - sequence 1 with `len` tokens (synced up to `synced`) cut to
 * `cut`, then `more` appended; checked, synced, reopened with the tier
 * off, checked, and verified: the index holds exactly the entries of the
 * tokens kept (a group of several pages cut inside keeps only the pages
 * its kept tokens reach) */
static void mp_cut(uint64_t budget, uint64_t synced, uint64_t len, uint64_t cut,
		   uint32_t more)
{
	char path[4096], name[64];
	kvf_verify_report vr = { .struct_size = sizeof(vr) };
	kvf_options o = mp_opts();
	kvf_store *st;
	uint64_t n;

	snprintf(name, sizeof(name), "mpt-%llu-%llu-%llu-%llu-%u",
		 (unsigned long long)budget, (unsigned long long)synced,
		 (unsigned long long)len, (unsigned long long)cut, more);
	snprintf(path, sizeof(path), "%s", tmp_path(fx.dir, name));
	o.dram_budget = budget;
	OK(kvf_open(path, &o, &st));
	OK(kvf_seq_create(st, 1));
	OK(mp_append(st, 0, (uint32_t)synced));
	OK(kvf_sync(st));
	OK(mp_append(st, synced, (uint32_t)(len - synced)));
	OK(kvf_seq_truncate(st, 1, cut));
	for (uint32_t l = 0; l < LAYERS; l++) {
		OK(kvf_seq_len(st, 1, l, &n));
		cr_assert(eq(u64, n, cut), "layer %u after the cut", l);
	}
	mp_tokens_ok(st, cut);
	OK(mp_append(st, cut, more));
	mp_tokens_ok(st, cut + more);
	OK(kvf_sync(st));
	OK(kvf_close(st));
	o.dram_budget = 0;
	OK(kvf_open(path, &o, &st));
	mp_tokens_ok(st, cut + more);
	OK(kvf_verify(st, NULL, NULL, &vr));
	cr_assert(eq(u64, vr.bad_pages, 0));
	cr_assert(eq(u64, vr.pages_checked,
		     LAYERS * 2 * SH_KVH * mp_entries(cut + more)),
		  "synced %llu, length %llu, cut %llu, more %u",
		  (unsigned long long)synced, (unsigned long long)len,
		  (unsigned long long)cut, more);
	OK(kvf_close(st));
}

Test(head_sizes, multi_page_groups_truncate)
{
	/* (synced, length, cut, more): inside the tail group; inside a
	 * whole group; inside a group a sync wrote part of, below and above
	 * what it wrote; on a group boundary; to nothing; a long way back */
	static const uint64_t cases[][4] = {
		{ 0, 3 * MP_G + 9, 3 * MP_G + 4, 1 },
		{ MP_G, 3 * MP_G + 9, 2 * MP_G + 5, MP_G - 4 },
		{ 2 * MP_G + 7, 3 * MP_G + 9, 2 * MP_G + 3, 2 },
		{ 2 * MP_G + 7, 3 * MP_G + 9, 2 * MP_G + 9, 0 },
		{ 3 * MP_G, 3 * MP_G + 9, 2 * MP_G, MP_G },
		{ 3 * MP_G + 5, 3 * MP_G + 9, 0, 1 },
		{ 5, 10 * MP_G, 4 * MP_G + 1, 1 },
	};

	for (int tier = 0; tier < 2; tier++)
		for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
			mp_cut(tier ? 0 : (64ull << 20), cases[i][0], cases[i][1],
			       cases[i][2], (uint32_t)cases[i][3]);
}
