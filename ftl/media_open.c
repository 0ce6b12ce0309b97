/*
 * media_open.c - kvf_media_open: the checked geometry, then the backend
 * the configuration names.  The one file that knows every backend, above
 * them all (media.c, the front they share, is below them).
 */
#include "ftl/media.h"

#include "api/status.h"

static int is_pow2(uint64_t x)
{
	return x != 0 && (x & (x - 1)) == 0;
}

static kvf_status check_geometry(const struct kvf_media_geometry *g)
{
	if (g->n_stripes == 0 || g->n_stripes > KVF_MEDIA_MAX_STRIPES)
		return kvf_fail(KVF_EINVAL,
				"kvf_media_open: n_stripes %u out of range (1..%u)",
				g->n_stripes, KVF_MEDIA_MAX_STRIPES);
	if (!is_pow2(g->page_size) || g->page_size < 512 ||
	    g->page_size > 65536)
		return kvf_fail(KVF_EINVAL,
				"kvf_media_open: page_size %u is not a power of two in 512..65536",
				g->page_size);
	if (g->pages_per_segment == 0)
		return kvf_fail(KVF_EINVAL,
				"kvf_media_open: pages_per_segment is 0");
	if (g->segs_per_stripe == 0)
		return kvf_fail(KVF_EINVAL,
				"kvf_media_open: segs_per_stripe is 0");
	if (g->segs_per_stripe > (UINT64_MAX >> 1) / kvf_media_segment_bytes(g))
		return kvf_fail(KVF_EINVAL,
				"kvf_media_open: %llu segments of %llu bytes overflow a stripe",
				(unsigned long long)g->segs_per_stripe,
				(unsigned long long)kvf_media_segment_bytes(g));
	return KVF_OK;
}

kvf_status kvf_media_open(const struct kvf_media_config *cfg,
			  struct kvf_media **out)
{
	kvf_status rc;

	if (out == NULL || cfg == NULL)
		return kvf_fail(KVF_EINVAL, "kvf_media_open: %s is NULL",
				out == NULL ? "out" : "cfg");
	*out = NULL;
	if ((rc = check_geometry(&cfg->geo)) != KVF_OK)
		return rc;
	switch (cfg->kind) {
	case KVF_MEDIA_MEMORY:
		rc = kvf_media_mem_open(cfg, out);
		break;
	case KVF_MEDIA_FILE:
		rc = kvf_media_file_open(cfg, out);
		break;
	case KVF_MEDIA_FLASH:
		rc = kvf_media_flash_open(cfg, out);
		break;
	default:
		return kvf_fail(KVF_EINVAL, "kvf_media_open: unknown media kind %d",
				(int)cfg->kind);
	}
	if (rc == KVF_OK)
		(*out)->read_only = cfg->read_only != 0;
	return rc;
}
