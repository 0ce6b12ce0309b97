/*
 * test_nand.c - the raw emulated NAND chips: every rule violation is
 * refused with KVF_EINVAL (or KVF_ERANGE) and a message naming the block
 * and page, and changes nothing; erase counts and retirement at the P/E
 * limit; real bytes in memory and in a sparse file; the power-cut hook
 * tears exactly the page in flight.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <string.h>

#include "api/alloc.h"
#include "api/status.h"
#include "flash_fixture.h"
#include "ftl/nand.h"
#include "testutil.h"

#define PAGE 4096u
#define PPB 8u

static struct nand n;

static void make(enum kvf_flash_backing backing, const char *path,
		 uint32_t pe_limit)
{
	struct nand_geometry g = {
		.channels = 2, .dies_per_channel = 2, .planes_per_die = 2,
		.blocks_per_plane = 4, .pages_per_block = PPB,
		.page_size = PAGE, .n_parts = 1,
	};
	struct kvf_flash_timing t = { 0 };
	uint32_t pe = pe_limit;

	cr_assert_not_null(ftl_cell_defaults(KVF_FLASH_TLC, &t, &pe));
	cr_assert(eq(int, nand_init(&n, &g, &t, pe, backing, path), KVF_OK),
		  "%s", kvf_last_error());
}

static void pattern(void *buf, uint32_t seed)
{
	uint32_t *w = buf;

	for (uint32_t i = 0; i < PAGE / 4; i++)
		w[i] = seed * 2654435761u + i;
}


Test(nand, geometry_and_layout)
{
	make(KVF_FLASH_BACKING_NONE, NULL, 0);
	cr_assert(eq(u32, n.geo.n_dies, 4));
	cr_assert(eq(u32, n.geo.n_blocks, 32));
	cr_assert(eq(u32, n.geo.page_shift, 3));
	cr_assert(eq(u32, n.pe_limit, 3000)); /* TLC rating */
	/* consecutive blocks go round robin over dies, dies over channels */
	for (uint32_t b = 0; b < n.geo.n_blocks; b++) {
		cr_assert(eq(u32, n.block_die[b], b % 4));
		cr_assert(eq(u32, nand_channel_of(&n, b), b % 2));
	}
	nand_release(&n);
}

Test(nand, program_out_of_order_refused)
{
	make(KVF_FLASH_BACKING_MEMORY, NULL, 0);
	cr_assert(eq(int, nand_program(&n, 3, 2, NULL), KVF_EINVAL));
	ffx_expect_msg("block 3 page 2");
	ffx_expect_msg("programmed in order and the next one is page 0");
	cr_assert(eq(u32, n.wp[3], 0));
	cr_assert(eq(u64, n.programs, 0));
	cr_assert(eq(int, nand_program(&n, 3, 0, NULL), KVF_OK));
	cr_assert(eq(int, nand_program(&n, 3, 5, NULL), KVF_EINVAL));
	ffx_expect_msg("the next one is page 1");
	cr_assert(eq(u32, n.wp[3], 1));
	nand_release(&n);
}

Test(nand, program_without_erase_refused)
{
	unsigned char *a = kvf_aligned_alloc(4096, PAGE);
	unsigned char *b = kvf_aligned_alloc(4096, PAGE);
	unsigned char *got = kvf_aligned_alloc(4096, PAGE);

	make(KVF_FLASH_BACKING_MEMORY, NULL, 0);
	pattern(a, 1);
	pattern(b, 2);
	cr_assert(eq(int, nand_program(&n, 5, 0, a), KVF_OK));
	cr_assert(eq(int, nand_program(&n, 5, 0, b), KVF_EINVAL));
	ffx_expect_msg("block 5 page 0");
	ffx_expect_msg("already programmed; erase the block");
	/* the first contents are intact */
	cr_assert(eq(int, nand_read(&n, 5, 0, got), KVF_OK));
	cr_assert(eq(int, memcmp(got, a, PAGE), 0));
	/* after an erase the page takes new data */
	cr_assert(eq(int, nand_erase(&n, 5), KVF_OK));
	cr_assert(eq(int, nand_program(&n, 5, 0, b), KVF_OK));
	cr_assert(eq(int, nand_read(&n, 5, 0, got), KVF_OK));
	cr_assert(eq(int, memcmp(got, b, PAGE), 0));
	kvf_free(a);
	kvf_free(b);
	kvf_free(got);
	nand_release(&n);
}

Test(nand, partial_block_erase_refused)
{
	make(KVF_FLASH_BACKING_NONE, NULL, 0);
	for (uint32_t p = 0; p < PPB; p++)
		cr_assert(eq(int, nand_program(&n, 7, p, NULL), KVF_OK));
	cr_assert(eq(int, nand_erase_pages(&n, 7, 0, PPB - 1), KVF_EINVAL));
	ffx_expect_msg("erase of block 7 pages 0..6 refused: erases are whole blocks");
	cr_assert(eq(int, nand_erase_pages(&n, 7, 2, PPB - 2), KVF_EINVAL));
	ffx_expect_msg("pages 2..7");
	cr_assert(eq(u32, n.wp[7], PPB));
	cr_assert(eq(u32, n.erase_count[7], 0));
	cr_assert(eq(int, nand_erase_pages(&n, 7, 0, PPB), KVF_OK));
	cr_assert(eq(u32, n.wp[7], 0));
	cr_assert(eq(u32, n.erase_count[7], 1));
	nand_release(&n);
}

Test(nand, out_of_range_refused)
{
	make(KVF_FLASH_BACKING_NONE, NULL, 0);
	cr_assert(eq(int, nand_program(&n, 32, 0, NULL), KVF_ERANGE));
	ffx_expect_msg("block 32 refused: the device has 32 blocks");
	cr_assert(eq(int, nand_program(&n, 0, PPB, NULL), KVF_ERANGE));
	ffx_expect_msg("page 8 refused: a block has 8 pages");
	cr_assert(eq(int, nand_erase(&n, 99), KVF_ERANGE));
	cr_assert(eq(int, nand_read(&n, 0, PPB, NULL), KVF_ERANGE));
	cr_assert(eq(u64, n.programs + n.erases + n.reads, 0));
	nand_release(&n);
}

Test(nand, erased_page_reads_ff_and_none_backing_keeps_no_data)
{
	unsigned char *buf = kvf_aligned_alloc(4096, PAGE);

	make(KVF_FLASH_BACKING_MEMORY, NULL, 0);
	cr_assert(eq(int, nand_read(&n, 1, 3, buf), KVF_OK));
	for (uint32_t i = 0; i < PAGE; i++)
		cr_assert(eq(u8, buf[i], 0xff));
	nand_release(&n);
	make(KVF_FLASH_BACKING_NONE, NULL, 0);
	cr_assert(eq(int, nand_program(&n, 1, 0, NULL), KVF_OK));
	cr_assert(eq(int, nand_read(&n, 1, 0, NULL), KVF_OK));
	cr_assert(eq(int, nand_read(&n, 1, 0, buf), KVF_ENOTSUP));
	ffx_expect_msg("keeps no data");
	kvf_free(buf);
	nand_release(&n);
}

Test(nand, retire_at_pe_limit)
{
	make(KVF_FLASH_BACKING_NONE, NULL, 3);
	for (uint32_t i = 0; i < 3; i++) {
		cr_assert(eq(int, nand_program(&n, 2, 0, NULL), KVF_OK));
		cr_assert(eq(int, nand_erase(&n, 2), KVF_OK));
	}
	cr_assert(nand_is_retired(&n, 2));
	cr_assert(eq(u32, n.erase_count[2], 3));
	cr_assert(eq(u64, n.retired, 1));
	cr_assert(eq(int, nand_program(&n, 2, 0, NULL), KVF_EINVAL));
	ffx_expect_msg("block 2 page 0 refused: the block is retired (3 erases, P/E limit 3)");
	cr_assert(eq(int, nand_erase(&n, 2), KVF_EINVAL));
	ffx_expect_msg("erase of block 2 refused: the block is retired");
	cr_assert(eq(u32, n.erase_count[2], 3));
	cr_assert(not(nand_is_retired(&n, 1)));
	nand_release(&n);
}

Test(nand, copy_moves_bytes_and_keeps_rules)
{
	unsigned char *a = kvf_aligned_alloc(4096, PAGE);
	unsigned char *got = kvf_aligned_alloc(4096, PAGE);

	make(KVF_FLASH_BACKING_MEMORY, NULL, 0);
	pattern(a, 9);
	cr_assert(eq(int, nand_program(&n, 0, 0, a), KVF_OK));
	cr_assert(eq(int, nand_copy(&n, 0, 1, 4, 0), KVF_EINVAL));
	ffx_expect_msg("block 0 page 1 refused: that page is not programmed");
	cr_assert(eq(int, nand_copy(&n, 0, 0, 4, 1), KVF_EINVAL));
	ffx_expect_msg("block 4 page 1");
	cr_assert(eq(int, nand_copy(&n, 0, 0, 4, 0), KVF_OK));
	cr_assert(eq(int, nand_read(&n, 4, 0, got), KVF_OK));
	cr_assert(eq(int, memcmp(got, a, PAGE), 0));
	kvf_free(a);
	kvf_free(got);
	nand_release(&n);
}

Test(nand, file_backing_round_trip_and_sparse)
{
	char *dir = tmpdir_make("nand_file");
	unsigned char *a = kvf_aligned_alloc(4096, PAGE);
	unsigned char *got = kvf_aligned_alloc(4096, PAGE);

	cr_assert_not_null(dir);
	make(KVF_FLASH_BACKING_FILE, tmp_path(dir, "flash.img"), 0);
	for (uint32_t p = 0; p < PPB; p++) {
		pattern(a, 100 + p);
		cr_assert(eq(int, nand_program(&n, 9, p, a), KVF_OK), "%s",
			  kvf_last_error());
	}
	for (uint32_t p = 0; p < PPB; p++) {
		pattern(a, 100 + p);
		cr_assert(eq(int, nand_read(&n, 9, p, got), KVF_OK));
		cr_assert(eq(int, memcmp(got, a, PAGE), 0));
	}
	cr_assert(eq(int, nand_copy(&n, 9, 3, 10, 0), KVF_OK));
	pattern(a, 103);
	cr_assert(eq(int, nand_read(&n, 10, 0, got), KVF_OK));
	cr_assert(eq(int, memcmp(got, a, PAGE), 0));
	cr_assert(eq(int, nand_erase(&n, 9), KVF_OK));
	cr_assert(eq(int, nand_read(&n, 9, 0, got), KVF_OK));
	cr_assert(eq(u8, got[0], 0xff));
	nand_release(&n);
	kvf_free(a);
	kvf_free(got);
	tmpdir_remove(dir);
}

Test(nand, power_cut_tears_only_the_page_in_flight)
{
	unsigned char *a = kvf_aligned_alloc(4096, PAGE);
	unsigned char *got = kvf_aligned_alloc(4096, PAGE);

	make(KVF_FLASH_BACKING_MEMORY, NULL, 0);
	nand_power_cut_arm(&n, 3);
	pattern(a, 1);
	cr_assert(eq(int, nand_program(&n, 6, 0, a), KVF_OK));
	pattern(a, 2);
	cr_assert(eq(int, nand_program(&n, 6, 1, a), KVF_OK));
	pattern(a, 3);
	cr_assert(eq(int, nand_program(&n, 6, 2, a), KVF_EIO));
	ffx_expect_msg("power cut while programming block 6 page 2");
	cr_assert(eq(u64, n.torn_pages, 1));
	/* dark until power returns */
	cr_assert(eq(int, nand_read(&n, 6, 0, got), KVF_EIO));
	ffx_expect_msg("the power is cut (block 6 page 2 was torn)");
	cr_assert(eq(int, nand_program(&n, 6, 3, a), KVF_EIO));
	cr_assert(eq(int, nand_erase(&n, 1), KVF_EIO));
	nand_power_on(&n);
	/* the pages before the cut are intact, the torn one is corrupt */
	pattern(a, 1);
	cr_assert(eq(int, nand_read(&n, 6, 0, got), KVF_OK));
	cr_assert(eq(int, memcmp(got, a, PAGE), 0));
	pattern(a, 2);
	cr_assert(eq(int, nand_read(&n, 6, 1, got), KVF_OK));
	cr_assert(eq(int, memcmp(got, a, PAGE), 0));
	cr_assert(eq(int, nand_read(&n, 6, 2, got), KVF_ECORRUPT));
	ffx_expect_msg("block 6 page 2 is torn");
	/* the block goes on in order; a copy of a torn page stays torn */
	cr_assert(eq(u32, n.wp[6], 3));
	cr_assert(eq(int, nand_program(&n, 6, 3, a), KVF_OK));
	cr_assert(eq(int, nand_copy(&n, 6, 2, 7, 0), KVF_OK));
	cr_assert(eq(int, nand_read(&n, 7, 0, got), KVF_ECORRUPT));
	ffx_expect_msg("block 7 page 0 is torn");
	/* erasing clears the torn state */
	cr_assert(eq(int, nand_erase(&n, 6), KVF_OK));
	cr_assert(eq(int, nand_program(&n, 6, 0, a), KVF_OK));
	cr_assert(eq(int, nand_program(&n, 6, 1, a), KVF_OK));
	cr_assert(eq(int, nand_program(&n, 6, 2, a), KVF_OK));
	cr_assert(eq(int, nand_read(&n, 6, 2, got), KVF_OK));
	cr_assert(eq(int, memcmp(got, a, PAGE), 0));
	kvf_free(a);
	kvf_free(got);
	nand_release(&n);
}
