/*
 * test_names.c - the names of the public enumerations (api/names.c):
 * every value named, a value out of range named "unknown".
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>

#include "kvflash.h"

Test(names, every_value)
{
	cr_assert(eq(str, (char *)kvf_dtype_name(KVF_DTYPE_F16), "f16"));
	cr_assert(eq(str, (char *)kvf_dtype_name(KVF_DTYPE_BF16), "bf16"));
	cr_assert(eq(str, (char *)kvf_dtype_name(KVF_DTYPE_F32), "f32"));
	cr_assert(eq(str, (char *)kvf_media_name(KVF_MEDIA_FILE), "file"));
	cr_assert(eq(str, (char *)kvf_media_name(KVF_MEDIA_MEMORY), "memory"));
	cr_assert(eq(str, (char *)kvf_media_name(KVF_MEDIA_FLASH), "flash"));
	cr_assert(eq(str, (char *)kvf_kind_name(KVF_KIND_K), "k"));
	cr_assert(eq(str, (char *)kvf_kind_name(KVF_KIND_V), "v"));
	cr_assert(eq(str, (char *)kvf_kind_name(KVF_KIND_X), "x"));
	cr_assert(eq(str, (char *)kvf_kind_name(KVF_KIND_KT), "kt"));
	cr_assert(eq(str, (char *)kvf_seg_state_name(KVF_SEG_FREE), "free"));
	cr_assert(eq(str, (char *)kvf_seg_state_name(KVF_SEG_OPEN), "open"));
	cr_assert(eq(str, (char *)kvf_seg_state_name(KVF_SEG_SEALED), "sealed"));
	cr_assert(eq(str, (char *)kvf_seg_state_name(KVF_SEG_DYING), "dying"));
	cr_assert(eq(str, (char *)kvf_seg_state_name(KVF_SEG_CORRUPT), "corrupt"));
}

Test(names, out_of_range)
{
	cr_assert(eq(str, (char *)kvf_dtype_name((kvf_dtype)3), "unknown"));
	cr_assert(eq(str, (char *)kvf_dtype_name((kvf_dtype)-1), "unknown"));
	cr_assert(eq(str, (char *)kvf_media_name((kvf_media_kind)3), "unknown"));
	cr_assert(eq(str, (char *)kvf_kind_name((kvf_kind)4), "unknown"));
	cr_assert(eq(str, (char *)kvf_seg_state_name((kvf_seg_state)5), "unknown"));
	cr_assert(eq(str, (char *)kvf_seg_state_name((kvf_seg_state)1000), "unknown"));
}
