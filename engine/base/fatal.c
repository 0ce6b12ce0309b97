/*
 * fatal.c - the store's sticky fatal state (engine/base/fatal.h).
 */
#include "engine/base/fatal.h"

#include <stdio.h>

#include "engine/base/store_state.h"

void fatal_init(struct store_fatal *f)
{
	atomic_init(&f->on, 0);
	pthread_mutex_init(&f->lock, NULL);
	f->msg[0] = '\0';
}

void fatal_destroy(struct store_fatal *f)
{
	pthread_mutex_destroy(&f->lock);
}

kvf_status store_writable(kvf_store *st, const char *call)
{
	kvf_status rc;

	if (st == NULL)
		return kvf_fail(KVF_EINVAL, "%s: store is NULL", call);
	if ((rc = store_check(st, call)) != KVF_OK)
		return rc;
	if (st->read_only)
		return kvf_fail(KVF_ENOTSUP, "%s: the store %s is open read-only",
				call, st->dir);
	return KVF_OK;
}

int store_failed(kvf_store *st)
{
	return atomic_load(&st->fatal.on);
}

kvf_status store_check(kvf_store *st, const char *call)
{
	if (atomic_load(&st->fatal.on))
		return kvf_fail(KVF_EFATAL,
				"%s: the store %s stopped after a failure; close and reopen it (%s)",
				call, st->dir, st->fatal.msg);
	return KVF_OK;
}

kvf_status store_set_fatal(kvf_store *st, kvf_status cause, const char *what)
{
	char prev[KVF_ERRMSG_CAP];
	int expected = 0;

	snprintf(prev, sizeof(prev), "%s", kvf_last_error());
	kvf_fail(KVF_EFATAL,
		 "%s failed (%s: %s); the store %s is now unusable: close and reopen it",
		 what, kvf_strerror(cause), prev, st->dir);
	/* the first failure names the cause for every later call: its
	 * message is in place before the flag that makes calls read it */
	pthread_mutex_lock(&st->fatal.lock);
	if (atomic_load(&st->fatal.on) == 0) {
		snprintf(st->fatal.msg, sizeof(st->fatal.msg), "%s",
			 kvf_last_error());
		atomic_compare_exchange_strong(&st->fatal.on, &expected, 1);
	}
	pthread_mutex_unlock(&st->fatal.lock);
	return KVF_EFATAL;
}
