/*
 * media_flash_calls.c - the calls only the flash media has (kvf_flash_*
 * in media_flash.h): writes on a stream and by logical page lists, reads
 * by list, TRIM of pages, idle time for background GC, power cuts and
 * power on, locating a page, the invariant check.  A file of its own: the
 * instrumented entry points for tests and kvbench, apart from the media
 * ops every backend has.
 *
 * Locking: each call takes the media's lock.
 */
#include "ftl/media_flash.h"

#include <pthread.h>

#include "api/status.h"
#include "ftl/ftl_map.h"
#include "ftl/media_flash_int.h"

/* ---- flash-only calls ---- */

static kvf_status check_stream(const struct media_flash *mf, uint32_t stream)
{
	if (stream >= mf->parts[0].prm.n_streams)
		return kvf_fail(KVF_EINVAL,
				"kvf_flash_write: stream %u out of range (the device has %u streams)",
				stream, mf->parts[0].prm.n_streams);
	return KVF_OK;
}

static kvf_status get_flash(struct kvf_media *m, const char *call,
			    struct media_flash **out)
{
	if (m == NULL)
		return kvf_fail(KVF_EINVAL, "%s: media is NULL", call);
	if (!kvf_media_is_flash(m))
		return kvf_fail(KVF_EINVAL,
				"%s: the media is the %s backend, not the flash emulator",
				call, m->ops->name);
	if (m->closed)
		return kvf_fail(KVF_ECLOSED, "%s: media is closed", call);
	*out = to_flash(m);
	return KVF_OK;
}

static kvf_status check_range(const struct media_flash *mf, const char *call,
			      uint32_t stripe, uint64_t lpn, uint64_t n)
{
	uint64_t n_lpn;

	if (stripe >= mf->n_parts)
		return kvf_fail(KVF_ERANGE,
				"%s: stripe %u out of range (media has %u)", call,
				stripe, mf->n_parts);
	n_lpn = mf->parts[stripe].n_lpn;
	if (lpn >= n_lpn || n > n_lpn - lpn)
		return kvf_fail(KVF_ERANGE,
				"%s: logical pages %llu..%llu past the end of stripe %u (%llu pages)",
				call, (unsigned long long)lpn,
				(unsigned long long)(lpn + n - 1), stripe,
				(unsigned long long)n_lpn);
	return KVF_OK;
}

kvf_status kvf_flash_write(struct kvf_media *m, const struct kvf_media_io *io,
			   uint32_t n_io, uint32_t stream)
{
	struct media_flash *mf = NULL;
	kvf_status rc;

	if ((rc = get_flash(m, "kvf_flash_write", &mf)) != KVF_OK)
		return rc;
	if ((rc = check_stream(mf, stream)) != KVF_OK)
		return rc;
	if ((rc = kvf_media_check_io("kvf_flash_write", m, io, n_io)) != KVF_OK)
		return rc;
	pthread_mutex_lock(&mf->lock);
	rc = media_flash_write_locked(mf, io, n_io, stream);
	pthread_mutex_unlock(&mf->lock);
	return rc;
}

kvf_status kvf_flash_write_lpns(struct kvf_media *m, uint32_t stripe,
				const uint64_t *lpns, uint32_t n,
				uint32_t stream)
{
	struct media_flash *mf = NULL;
	kvf_status rc;

	if ((rc = get_flash(m, "kvf_flash_write_lpns", &mf)) != KVF_OK)
		return rc;
	if ((rc = check_stream(mf, stream)) != KVF_OK)
		return rc;
	if ((rc = check_range(mf, "kvf_flash_write_lpns", stripe, 0, 1)) != KVF_OK)
		return rc;
	if (lpns == NULL && n != 0)
		return kvf_fail(KVF_EINVAL, "kvf_flash_write_lpns: lpns is NULL");
	for (uint32_t i = 0; i < n; i++)
		if (lpns[i] >= mf->parts[stripe].n_lpn)
			return check_range(mf, "kvf_flash_write_lpns", stripe,
					   lpns[i], 1);
	pthread_mutex_lock(&mf->lock);
	if (mf->cfg.issue == KVF_FLASH_ISSUE_SYNC) {
		rc = KVF_OK;
		for (uint32_t i = 0; i < n && rc == KVF_OK; i++) {
			uint64_t t0 = media_flash_request_begin(mf);

			rc = ftl_write_list(part_of(mf, stripe), &lpns[i], 1,
					    stream);
			media_flash_request_end(mf, t0);
		}
	} else {
		rc = ftl_write_list(part_of(mf, stripe), lpns, n, stream);
	}
	mf->write_ios += n;
	pthread_mutex_unlock(&mf->lock);
	return rc;
}

kvf_status kvf_flash_read_lpns(struct kvf_media *m, uint32_t stripe,
			       const uint64_t *lpns, uint32_t n)
{
	struct media_flash *mf = NULL;
	kvf_status rc;

	if ((rc = get_flash(m, "kvf_flash_read_lpns", &mf)) != KVF_OK)
		return rc;
	if ((rc = check_range(mf, "kvf_flash_read_lpns", stripe, 0, 1)) != KVF_OK)
		return rc;
	if (lpns == NULL && n != 0)
		return kvf_fail(KVF_EINVAL, "kvf_flash_read_lpns: lpns is NULL");
	for (uint32_t i = 0; i < n; i++)
		if (lpns[i] >= mf->parts[stripe].n_lpn)
			return check_range(mf, "kvf_flash_read_lpns", stripe,
					   lpns[i], 1);
	pthread_mutex_lock(&mf->lock);
	rc = KVF_OK;
	for (uint32_t i = 0; i < n && rc == KVF_OK; i++) {
		uint64_t t0 = media_flash_request_begin(mf);

		rc = ftl_read(part_of(mf, stripe), lpns[i], 1, NULL);
		media_flash_request_end(mf, t0);
	}
	mf->read_ios += n;
	pthread_mutex_unlock(&mf->lock);
	return rc;
}

kvf_status kvf_flash_trim_pages(struct kvf_media *m, uint32_t stripe,
				uint64_t lpn, uint64_t n)
{
	struct media_flash *mf = NULL;
	kvf_status rc;

	if ((rc = get_flash(m, "kvf_flash_trim_pages", &mf)) != KVF_OK)
		return rc;
	if (n == 0)
		return KVF_OK;
	if ((rc = check_range(mf, "kvf_flash_trim_pages", stripe, lpn, n)) !=
	    KVF_OK)
		return rc;
	pthread_mutex_lock(&mf->lock);
	rc = ftl_trim(part_of(mf, stripe), lpn, n);
	pthread_mutex_unlock(&mf->lock);
	return rc;
}

kvf_status kvf_flash_idle(struct kvf_media *m, uint64_t idle_ns)
{
	struct ftl_time *tm;
	struct media_flash *mf = NULL;
	uint64_t start;
	kvf_status rc;

	if ((rc = get_flash(m, "kvf_flash_idle", &mf)) != KVF_OK)
		return rc;
	pthread_mutex_lock(&mf->lock);
	tm = &mf->nand.time;
	start = time_max(tm->issue_ns, tm->end_ns);
	tm->issue_ns = start;
	for (uint32_t p = 0; p < mf->n_parts && rc == KVF_OK; p++) {
		uint64_t budget = idle_ns;

		/* stripes own separate dies: each gets the whole idle time */
		rc = ftl_collect(&mf->parts[p], mf->parts[p].prm.bg_free,
				 &budget);
	}
	tm->issue_ns = start + idle_ns;
	pthread_mutex_unlock(&mf->lock);
	return rc;
}

kvf_status kvf_flash_power_cut(struct kvf_media *m, uint64_t after)
{
	struct media_flash *mf = NULL;
	kvf_status rc;

	if ((rc = get_flash(m, "kvf_flash_power_cut", &mf)) != KVF_OK)
		return rc;
	if (after == 0)
		return kvf_fail(KVF_EINVAL,
				"kvf_flash_power_cut: after must be at least 1 program");
	pthread_mutex_lock(&mf->lock);
	nand_power_cut_arm(&mf->nand, after);
	pthread_mutex_unlock(&mf->lock);
	return KVF_OK;
}

kvf_status kvf_flash_power_on(struct kvf_media *m)
{
	struct media_flash *mf = NULL;
	kvf_status rc;

	if ((rc = get_flash(m, "kvf_flash_power_on", &mf)) != KVF_OK)
		return rc;
	pthread_mutex_lock(&mf->lock);
	nand_power_on(&mf->nand);
	for (uint32_t p = 0; p < mf->n_parts && rc == KVF_OK; p++)
		rc = ftl_power_restored(&mf->parts[p]);
	pthread_mutex_unlock(&mf->lock);
	return rc;
}

kvf_status kvf_flash_locate(struct kvf_media *m, uint32_t stripe,
			    uint64_t lpn, uint32_t *block, uint32_t *page)
{
	struct media_flash *mf = NULL;
	kvf_status rc;

	if ((rc = get_flash(m, "kvf_flash_locate", &mf)) != KVF_OK)
		return rc;
	if ((rc = check_range(mf, "kvf_flash_locate", stripe, lpn, 1)) != KVF_OK)
		return rc;
	pthread_mutex_lock(&mf->lock);
	ftl_locate(&mf->parts[stripe], lpn, block, page);
	pthread_mutex_unlock(&mf->lock);
	return KVF_OK;
}

kvf_status kvf_flash_check(struct kvf_media *m)
{
	struct media_flash *mf = NULL;
	kvf_status rc;

	if ((rc = get_flash(m, "kvf_flash_check", &mf)) != KVF_OK)
		return rc;
	pthread_mutex_lock(&mf->lock);
	for (uint32_t p = 0; p < mf->n_parts && rc == KVF_OK; p++)
		rc = ftl_check(&mf->parts[p]);
	pthread_mutex_unlock(&mf->lock);
	return rc;
}

struct nand *kvf_flash_nand(struct kvf_media *m)
{
	return kvf_media_is_flash(m) ? &to_flash(m)->nand : NULL;
}
