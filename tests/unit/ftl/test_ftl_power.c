/*
 * test_ftl_power.c - power cuts on the flash media's FTL: a cut tears
 * only the host page in flight, a cut during GC loses nothing, and the
 * same under block-level mapping.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <stdio.h>
#include <string.h>

#include "api/alloc.h"
#include "api/status.h"
#include "flash_fixture.h"
#include "ftl/media_flash.h"
#include "testutil.h"

/* ---- power cuts ---- */

struct pc {
	struct kvf_media *m;
	uint32_t *ver;      /* [lpn] latest version */
	uint64_t n_lpn;     /* logical pages */
	unsigned char *buf; /* 8 pages */
	unsigned char *tmp; /* 1 page */
};

static void pc_open(struct pc *p, enum kvf_flash_mapping mapping)
{
	struct kvf_flash_config fc;

	kvf_flash_config_init(&fc);
	fc.mapping = mapping;
	fc.spare_factor = 0.25;
	p->n_lpn = 32 * 8;
	p->m = ffx_open_flash(&fc, 1, 8, 32);
	p->ver = kvf_calloc(p->n_lpn, sizeof(uint32_t));
	p->buf = kvf_aligned_alloc(KVF_MEDIA_ALIGN, 8 * FFX_PAGE);
	p->tmp = kvf_malloc(FFX_PAGE);
}

static void pc_close(struct pc *p)
{
	kvf_media_free(p->m);
	kvf_free(p->ver);
	kvf_free(p->buf);
	kvf_free(p->tmp);
}

static kvf_status pc_write(struct pc *p, uint64_t lpn, uint32_t n, uint32_t ver)
{
	for (uint32_t i = 0; i < n; i++)
		ffx_fill(p->buf + i * FFX_PAGE, 0, lpn + i, ver);
	return kvf_media_write(p->m,
			       &(struct kvf_media_io){ .stripe = 0,
						       .seg = lpn / 8,
						       .page = lpn % 8,
						       .n_pages = n,
						       .buf = p->buf },
			       1);
}

/* pc_verify - every page but `torn` (UINT64_MAX: none) reads its version */
static void pc_verify(struct pc *p, uint64_t torn)
{
	for (uint64_t l = 0; l < p->n_lpn; l++) {
		kvf_status rc =
			kvf_media_read_pages(p->m, 0, l / 8, l % 8, 1, p->buf);

		if (l == torn) {
			cr_assert(eq(int, rc, KVF_ECORRUPT), "lpn %llu",
				  (unsigned long long)l);
			continue;
		}
		cr_assert(eq(int, rc, KVF_OK), "lpn %llu: %s",
			  (unsigned long long)l, kvf_last_error());
		cr_assert(ffx_same(p->buf, 0, l, p->ver[l], p->tmp), "lpn %llu",
			  (unsigned long long)l);
	}
}

Test(ftl_power, power_cut_tears_only_the_host_page_in_flight)
{
	struct pc p;
	uint32_t blk, pg;
	char want[96];

	pc_open(&p, KVF_FLASH_MAP_PAGE);
	for (uint64_t l = 0; l < p.n_lpn; l++) {
		cr_assert(eq(int, pc_write(&p, l, 1, 1), KVF_OK));
		p.ver[l] = 1;
	}
	cr_assert(eq(int, kvf_flash_power_cut(p.m, 3), KVF_OK));
	/* five pages 40..44: 40 and 41 land, 42 tears, 43 and 44 never go */
	cr_assert(eq(int, pc_write(&p, 40, 5, 2), KVF_EIO));
	ffx_expect_msg("power cut while programming");
	cr_assert(eq(int, pc_write(&p, 100, 1, 2), KVF_EIO));
	ffx_expect_msg("the power is cut");
	cr_assert(
		eq(int, kvf_media_read_pages(p.m, 0, 0, 0, 1, p.buf), KVF_EIO));
	cr_assert(eq(int, kvf_flash_power_on(p.m), KVF_OK));
	p.ver[40] = p.ver[41] = 2;
	pc_verify(&p, 42);
	cr_assert(eq(int, kvf_flash_locate(p.m, 0, 42, &blk, &pg), KVF_OK));
	cr_assert(eq(int, kvf_media_read_pages(p.m, 0, 5, 2, 1, p.buf),
		     KVF_ECORRUPT));
	snprintf(want, sizeof(want), "block %u page %u is torn", blk, pg);
	ffx_expect_msg(want);
	cr_assert(eq(u64, ffx_flash_stats(p.m).torn_pages, 1));
	cr_assert(eq(int, kvf_flash_check(p.m), KVF_OK), "%s",
		  kvf_last_error());
	/* rewriting the torn page heals it */
	cr_assert(eq(int, pc_write(&p, 42, 1, 3), KVF_OK));
	p.ver[42] = 3;
	pc_verify(&p, UINT64_MAX);
	pc_close(&p);
}

Test(ftl_power, power_cut_during_gc_loses_nothing)
{
	uint64_t seed = rng_seed("ftl_map.power_cut_during_gc_loses_nothing");
	uint32_t ver = 2, gc_cuts = 0;
	struct pc p;

	pc_open(&p, KVF_FLASH_MAP_PAGE);
	for (uint64_t l = 0; l < p.n_lpn; l++) {
		cr_assert(eq(int, pc_write(&p, l, 1, 1), KVF_OK));
		p.ver[l] = 1;
	}
	/* cut the very next program, write by write, until it tears GC
	 * copies a few times */
	for (int i = 0; i < 4000 && gc_cuts < 5; i++) {
		uint64_t l = rng_below(&seed, p.n_lpn);
		struct kvf_flash_stats a = ffx_flash_stats(p.m), b;
		kvf_status rc;

		cr_assert(eq(int, kvf_flash_power_cut(p.m, 1 + i % 3), KVF_OK));
		rc = pc_write(&p, l, 1, ver);
		b = ffx_flash_stats(p.m);
		if (rc == KVF_OK) {
			p.ver[l] = ver++;
			continue;
		}
		cr_assert(eq(int, rc, KVF_EIO), "%s", kvf_last_error());
		cr_assert(eq(int, kvf_flash_power_on(p.m), KVF_OK));
		if (b.gc_programs > a.gc_programs + 0 &&
		    b.host_pages == a.host_pages) {
			/* a GC copy tore: nothing is lost, l kept its data */
			gc_cuts++;
			pc_verify(&p, UINT64_MAX);
		} else {
			/* the host page tore: only it is corrupt */
			pc_verify(&p, l);
			cr_assert(eq(int, pc_write(&p, l, 1, ver), KVF_OK));
			p.ver[l] = ver++;
		}
		cr_assert(eq(int, kvf_flash_check(p.m), KVF_OK), "%s",
			  kvf_last_error());
	}
	cr_assert(eq(u32, gc_cuts, 5));
	/* disarm: the last cut may still be pending */
	cr_assert(eq(int, kvf_flash_power_cut(p.m, UINT64_MAX), KVF_OK));
	pc_verify(&p, UINT64_MAX);
	pc_close(&p);
}

Test(ftl_power, power_cut_block_mapping)
{
	struct pc p;

	pc_open(&p, KVF_FLASH_MAP_BLOCK);
	for (uint64_t l = 0; l < 8 * 8; l++) {
		cr_assert(eq(int, pc_write(&p, l, 1, 1), KVF_OK));
		p.ver[l] = 1;
	}
	/* an append (segment 10 is empty): the torn page is mapped */
	cr_assert(eq(int, pc_write(&p, 80, 2, 1), KVF_OK));
	p.ver[80] = p.ver[81] = 1;
	cr_assert(eq(int, kvf_flash_power_cut(p.m, 2), KVF_OK));
	cr_assert(eq(int, pc_write(&p, 82, 3, 1), KVF_EIO));
	cr_assert(eq(int, kvf_flash_power_on(p.m), KVF_OK));
	p.ver[82] = 1;
	pc_verify(&p, 83);
	/* a merge (rewrite inside a full block) is all or nothing: the old
	 * block stays mapped and the half-filled new one is erased */
	cr_assert(eq(int, kvf_flash_power_cut(p.m, 4), KVF_OK));
	cr_assert(eq(int, pc_write(&p, 16 + 5, 1, 2), KVF_EIO));
	cr_assert(eq(int, kvf_flash_power_on(p.m), KVF_OK));
	cr_assert(eq(int, kvf_flash_check(p.m), KVF_OK), "%s",
		  kvf_last_error());
	cr_assert(eq(int, pc_write(&p, 83, 1, 1), KVF_OK));
	p.ver[83] = 1;
	pc_verify(&p, UINT64_MAX);
	pc_close(&p);
}
