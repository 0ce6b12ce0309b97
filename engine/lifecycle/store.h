/*
 * store.h - the store's lifecycle beyond the public kvf_open and
 * kvf_close (store.c).
 */
#ifndef KVF_ENGINE_STORE_H
#define KVF_ENGINE_STORE_H

#include "api/status.h"
#include "kvflash.h"

struct kvf_media;

/*
 * store_open_media - kvf_open, on the caller's media when media is not
 * NULL: the store then uses it as it is (no fresh start for memory or
 * flash media), and kvf_close leaves it open.  For tests and benchmarks
 * that keep a device across store handles (power cuts on the flash
 * emulator).
 */
kvf_status store_open_media(const char *dir, const kvf_options *opts,
			    struct kvf_media *media, kvf_store **out);

#endif /* KVF_ENGINE_STORE_H */
