/*
 * flash_fixture.c - what the FTL tests share; see flash_fixture.h.
 * Gathered from test_ftl_map.c.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <string.h>

#include "flash_fixture.h"

struct kvf_media *ffx_open_flash(struct kvf_flash_config *fc, uint32_t stripes,
				 uint32_t pps, uint64_t segs)
{
	struct kvf_media_config mc = {
		.kind = KVF_MEDIA_FLASH,
		.geo = { .n_stripes = stripes,
			 .page_size = FFX_PAGE,
			 .pages_per_segment = pps,
			 .segs_per_stripe = segs },
		.flash = fc,
	};
	struct kvf_media *m = NULL;

	cr_assert(eq(int, kvf_media_open(&mc, &m), KVF_OK), "%s",
		  kvf_last_error());
	return m;
}

/* page contents: words derived from (stripe, lpn, version); 0 = zeros */
void ffx_fill(void *buf, uint32_t stripe, uint64_t lpn, uint32_t ver)
{
	uint64_t *w = buf, h;

	if (ver == 0) {
		memset(buf, 0, FFX_PAGE);
		return;
	}
	h = (lpn * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)stripe << 56) ^
	    ((uint64_t)ver << 32);
	for (uint32_t i = 0; i < FFX_PAGE / 8; i++)
		w[i] = h + i;
}

int ffx_same(const void *got, uint32_t stripe, uint64_t lpn, uint32_t ver,
	     void *scratch)
{
	ffx_fill(scratch, stripe, lpn, ver);
	return memcmp(got, scratch, FFX_PAGE) == 0;
}

void ffx_expect_msg(const char *needle)
{
	cr_assert(strstr(kvf_last_error(), needle) != NULL,
		  "message '%s' lacks '%s'", kvf_last_error(), needle);
}

struct kvf_flash_stats ffx_flash_stats(struct kvf_media *m)
{
	struct kvf_flash_stats s;

	cr_assert(eq(int, kvf_flash_stats(m, &s), KVF_OK));
	return s;
}
