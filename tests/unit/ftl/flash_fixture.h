/*
 * flash_fixture.h - what the FTL tests that go through the flash media
 * share (test_ftl_map.c, test_ftl_power.c, test_media_flash.c,
 * test_nand.c; EXPECT also test_media_common.c and test_media_file.c):
 * opening a flash media of a given geometry, page contents that name
 * (stripe, lpn, version), the message checks and the stats.
 * Compiled into unit_ftl; it uses Criterion's assertions.
 */
#ifndef KVF_TEST_FLASH_FIXTURE_H
#define KVF_TEST_FLASH_FIXTURE_H

#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <stdint.h>
#include <string.h>

#include "api/status.h"
#include "ftl/media_flash.h"

#define FFX_PAGE 4096u /* the page size ffx_open_flash gives */

/* ffx_open_flash - a flash media of fc with stripes stripes of segs
 * segments of pps FFX_PAGE pages, in memory */
struct kvf_media *ffx_open_flash(struct kvf_flash_config *fc, uint32_t stripes,
				 uint32_t pps, uint64_t segs);
/* ffx_fill - page contents: words derived from (stripe, lpn, version);
 * version 0 = zeros */
void ffx_fill(void *buf, uint32_t stripe, uint64_t lpn, uint32_t ver);
/* ffx_same - got is ffx_fill's page (scratch: one page) */
int ffx_same(const void *got, uint32_t stripe, uint64_t lpn, uint32_t ver,
	     void *scratch);
/* ffx_expect_msg - the thread's last error contains needle */
void ffx_expect_msg(const char *needle);
/*
 * EXPECT - a call that must give `status` with a message containing
 * `text` (the last error is cleared first, so the call must set its own)
 */
#define EXPECT(call, status, text)                                            \
	do {                                                                  \
		kvf_clear_error();                                            \
		cr_assert(eq(int, (call), (status)), "%s", kvf_last_error());  \
		cr_assert(ne(ptr, strstr(kvf_last_error(), (text)), NULL),     \
			  "message '%s' lacks '%s'", kvf_last_error(), (text)); \
	} while (0)

/* ffx_flash_stats - kvf_flash_stats of m, which must succeed */
struct kvf_flash_stats ffx_flash_stats(struct kvf_media *m);

#endif /* KVF_TEST_FLASH_FIXTURE_H */
