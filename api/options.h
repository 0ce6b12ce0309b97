/*
 * options.h - defaults of the public option structs, and the struct_size
 * check every call that takes such a struct makes first.
 */
#ifndef KVF_OPTIONS_H
#define KVF_OPTIONS_H

#include "api/status.h"

#define KVF_DEFAULT_PAGE_SIZE 4096u
#define KVF_DEFAULT_SEGMENT_SIZE (1u << 20)
#define KVF_DEFAULT_CAPACITY (4ull << 30)
#define KVF_DEFAULT_DRAM_BUDGET (1ull << 30) /* kvf_options.dram_budget */
#define KVF_DEFAULT_PREFIX_CACHE_BYTES (1ull << 30) /* kvf_options.prefix_cache_bytes */
#define KVF_DEFAULT_EVICT_HIGH 0.90f /* kvf_options.evict_high */
#define KVF_DEFAULT_EVICT_LOW 0.80f  /* kvf_options.evict_low */
#define KVF_DEFAULT_QUEUE_DEPTH 32u

/*
 * kvf_struct_check - accept a caller struct of any size that starts with
 * struct_size: smaller than ours is an older caller (missing fields take
 * defaults), larger is a newer caller and is refused with KVF_EVERSION
 * unless its unknown tail is all zero.
 * Return: KVF_OK, KVF_EINVAL (NULL or struct_size too small), KVF_EVERSION.
 */
kvf_status kvf_struct_check(const char *call, const char *what,
			    const void *p, size_t lib_size);

#endif /* KVF_OPTIONS_H */
