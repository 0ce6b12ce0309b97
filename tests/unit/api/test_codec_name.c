/*
 * test_codec_name.c - kvf_codec_name (api/names.c): each codec named as
 * DESIGN.md fixes it, a value out of range named "unknown".
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>

#include "kvflash.h"

Test(codec_name, every_value)
{
	cr_assert(eq(int, KVF_CODEC_NONE, 0));
	cr_assert(eq(str, (char *)kvf_codec_name(KVF_CODEC_NONE), "none"));
	cr_assert(eq(str, (char *)kvf_codec_name(KVF_CODEC_FP8), "fp8"));
	cr_assert(eq(str, (char *)kvf_codec_name(KVF_CODEC_INT8), "int8"));
	cr_assert(eq(str, (char *)kvf_codec_name(KVF_CODEC_INT4), "int4"));
}

Test(codec_name, out_of_range)
{
	cr_assert(eq(str, (char *)kvf_codec_name((kvf_codec)4), "unknown"));
	cr_assert(eq(str, (char *)kvf_codec_name((kvf_codec)-1), "unknown"));
}
