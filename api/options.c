/*
 * options.c - defaults of the public option structs.
 *
 * Each _init_sized fills a full default struct of this library's size and
 * copies only the caller's struct_size bytes of it, so a caller compiled
 * against an older, smaller struct never gets bytes written past its end
 * (the kernel's copy_struct_from_user rule, in the other direction).
 */
#include "api/options.h"

#include <string.h>

/* fill_sized - copy the first struct_size bytes of full into dst and stamp
 * struct_size; a size too small to hold struct_size itself writes nothing */
static void fill_sized(void *dst, const void *full, size_t full_size,
		       size_t struct_size)
{
	size_t n = struct_size < full_size ? struct_size : full_size;

	if (dst == NULL || struct_size < sizeof(size_t))
		return;
	memcpy(dst, full, n);
	/* a newer caller's fields this library does not know are zeroed,
	 * which is their default */
	if (struct_size > full_size)
		memset((char *)dst + full_size, 0, struct_size - full_size);
	memcpy(dst, &struct_size, sizeof(size_t));
}

void kvf_options_init_sized(kvf_options *o, const kvf_model *m,
			    size_t struct_size)
{
	kvf_options d;

	memset(&d, 0, sizeof(d));
	if (m)
		d.model = *m;
	d.media = KVF_MEDIA_FILE;
	d.page_size = KVF_DEFAULT_PAGE_SIZE;
	d.n_threads = 0;
	d.kt_pages = 0;
	d.segment_size = KVF_DEFAULT_SEGMENT_SIZE;
	d.capacity_bytes = KVF_DEFAULT_CAPACITY;
	d.n_stripes = 0;
	d.queue_depth = KVF_DEFAULT_QUEUE_DEPTH;
	d.device_paths = NULL;
	d.n_device_paths = 0;
	d.direct_io = 0;
	d.dram_budget = KVF_DEFAULT_DRAM_BUDGET;
	d.evict_policy = KVF_EVICT_NONE;
	d.evict_high = KVF_DEFAULT_EVICT_HIGH;
	d.evict_low = KVF_DEFAULT_EVICT_LOW;
	d.prefix_cache_bytes = KVF_DEFAULT_PREFIX_CACHE_BYTES;
	fill_sized(o, &d, sizeof(d), struct_size);
}

void kvf_attn_opts_init_sized(kvf_attn_opts *o, size_t struct_size)
{
	kvf_attn_opts d;

	memset(&d, 0, sizeof(d));
	d.scale = 0.0f;
	d.sparse = 0;
	d.top_r = 0;
	d.top_k = 0;
	d.lse = NULL;
	d.sink_tokens = 0;   /* KVF_SINK_TOKENS_DEFAULT */
	d.recent_tokens = 0; /* top_k / KVF_RECENT_SHARE_DEFAULT */
	fill_sized(o, &d, sizeof(d), struct_size);
}

void kvf_opt_config_init_sized(kvf_opt_config *c, kvf_opt_kind kind,
			       size_t struct_size)
{
	kvf_opt_config d;

	memset(&d, 0, sizeof(d));
	d.kind = kind;
	d.beta1 = 0.9f;
	d.beta2 = 0.999f;
	d.out_dtype = KVF_DTYPE_F32;
	switch (kind) {
	case KVF_OPT_ADAM:
		d.lr = 1e-3f;
		d.eps = 1e-8f;
		break;
	case KVF_OPT_ADAMW:
		d.lr = 1e-3f;
		d.eps = 1e-8f;
		d.weight_decay = 1e-2f;
		break;
	case KVF_OPT_SGD:
		d.lr = 1e-3f;
		break;
	case KVF_OPT_ADAGRAD:
		d.lr = 1e-2f;
		d.eps = 1e-10f;
		break;
	}
	fill_sized(c, &d, sizeof(d), struct_size);
}

void kvf_tensor_init_sized(kvf_tensor *t, size_t struct_size)
{
	kvf_tensor d;

	memset(&d, 0, sizeof(d));
	d.dtype = KVF_DTYPE_F16;
	d.data = NULL;
	fill_sized(t, &d, sizeof(d), struct_size);
}

void kvf_profile_init_sized(kvf_profile *p, size_t struct_size)
{
	kvf_profile d;

	memset(&d, 0, sizeof(d));
	fill_sized(p, &d, sizeof(d), struct_size);
}

size_t kvf_struct_size(kvf_struct which)
{
	switch (which) {
	case KVF_STRUCT_OPTIONS:
		return sizeof(kvf_options);
	case KVF_STRUCT_ATTN_OPTS:
		return sizeof(kvf_attn_opts);
	case KVF_STRUCT_STATS:
		return sizeof(kvf_stats);
	case KVF_STRUCT_OPT_CONFIG:
		return sizeof(kvf_opt_config);
	case KVF_STRUCT_GRAD:
		return sizeof(kvf_grad);
	case KVF_STRUCT_TENSOR:
		return sizeof(kvf_tensor);
	case KVF_STRUCT_STORE_INFO:
		return sizeof(kvf_store_info);
	case KVF_STRUCT_SEQ_INFO:
		return sizeof(kvf_seq_info);
	case KVF_STRUCT_MODEL:
		return sizeof(kvf_model);
	case KVF_STRUCT_PROFILE:
		return sizeof(kvf_profile);
	case KVF_STRUCT_KVPR_PLAN:
		return sizeof(kvf_kvpr_plan);
	case KVF_STRUCT_XCACHE_PLAN:
		return sizeof(kvf_xcache_plan);
	}
	return 0;
}

kvf_status kvf_struct_check(const char *call, const char *what,
			    const void *p, size_t lib_size)
{
	size_t caller_size;
	const unsigned char *tail;

	if (p == NULL)
		return kvf_fail(KVF_EINVAL, "%s: %s is NULL", call, what);
	memcpy(&caller_size, p, sizeof(size_t));
	if (caller_size < sizeof(size_t))
		return kvf_fail(KVF_EINVAL,
				"%s: %s.struct_size %zu is too small (use the _init function)",
				call, what, caller_size);
	if (caller_size <= lib_size)
		return KVF_OK;
	tail = (const unsigned char *)p + lib_size;
	for (size_t i = 0; i < caller_size - lib_size; i++)
		if (tail[i] != 0)
			return kvf_fail(KVF_EVERSION,
					"%s: %s.struct_size %zu is larger than this library's %zu and byte %zu of the unknown tail is not zero",
					call, what, caller_size, lib_size,
					lib_size + i);
	return KVF_OK;
}

void kvf_h2o_evict_opts_init_sized(kvf_h2o_evict_opts *o, size_t struct_size)
{
	kvf_h2o_evict_opts d;

	memset(&d, 0, sizeof(d));
	d.keep = 0.5;
	d.keep_tokens = 0;
	d.sinks = 0;  /* KVF_SINK_TOKENS_DEFAULT */
	d.window = 0; /* half of what a layer keeps */
	fill_sized(o, &d, sizeof(d), struct_size);
}
