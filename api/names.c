/*
 * names.c - the names of the public enumerations, for messages, listings
 * and bindings (kvtool, kvbench, the Python package).
 */
#include "kvflash.h"

#define NAME_OF(table, v) \
	((unsigned)(v) < sizeof(table) / sizeof(table[0]) ? table[v] : "unknown")

const char *kvf_dtype_name(kvf_dtype dtype)
{
	static const char *const names[] = { "f16", "bf16", "f32" };

	return NAME_OF(names, dtype);
}

const char *kvf_media_name(kvf_media_kind media)
{
	static const char *const names[] = { "file", "memory", "flash" };

	return NAME_OF(names, media);
}

const char *kvf_codec_name(kvf_codec codec)
{
	static const char *const names[] = { "none", "fp8", "int8", "int4" };

	return NAME_OF(names, codec);
}

const char *kvf_kind_name(kvf_kind kind)
{
	static const char *const names[] = { "k", "v", "x", "kt" };

	return NAME_OF(names, kind);
}

const char *kvf_seg_state_name(kvf_seg_state state)
{
	static const char *const names[] = { "free", "open", "sealed", "dying",
					     "corrupt" };

	return NAME_OF(names, state);
}
