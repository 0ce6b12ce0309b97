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
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
