/*
 * recovery.h - rebuilding the in-memory state of a store at open.
 */
#ifndef KVF_ENGINE_RECOVERY_H
#define KVF_ENGINE_RECOVERY_H

#include "engine/base/store_state.h"

/*
 * recovery_sync_record - read the catalog's last durable point ("N"): the
 * synced seqno, the syncs and points counted, the byte counters.  First,
 * so that a catalog that lost points is refused (store.c, check_mark)
 * before recovery_load changes anything.  Return: KVF_OK (none yet is
 * fine); KVF_ECORRUPT for a malformed record; the catalog's error.
 */
kvf_status recovery_sync_record(kvf_store *st);

/*
 * recovery_load - after recovery_sync_record: load sequences, segments
 * and the index from the catalog,
 * verify the summary of every segment the catalog names, and drop what the
 * last sync did not make durable.  A segment whose summary fails and that
 * was committed after the last sync is discarded; one committed before is
 * kept as CORRUPT (its pages read as KVF_ECORRUPT).  Segments left without
 * live pages are trimmed.
 * Return: KVF_OK; KVF_ECORRUPT for a catalog record that cannot be
 * parsed (message names the record); KVF_EIO; KVF_ENOMEM.
 */
kvf_status recovery_load(kvf_store *st);

#endif /* KVF_ENGINE_RECOVERY_H */
