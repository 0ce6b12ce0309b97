/*
 * test_meta_run.c - meta_run_add (engine/base/meta.h), which builds the runs of
 * a segment's "G" record one page at a time: a page extends the last run
 * only when it is the next page and the next group (at the run's stride;
 * a run of one page takes the stride, up to META_STRIDE_MAX) of the same
 * (seq, family, stream, ns) and the run is below META_RUN_MAX pages;
 * anything else starts a new run and leaves the earlier ones as they
 * were.  Each
 * test checks every field of every run and the count.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <stddef.h>

#include "engine/base/meta.h"

TestSuite(meta_run, .timeout = 30);

/* slot - one page's owner, as the writers pass it (n = 1) */
static struct meta_run slot(uint64_t seq, uint32_t stream, uint32_t group,
			    uint32_t page)
{
	return (struct meta_run){ .seq = seq, .family = seq, .stream = stream,
				  .group = group, .page = page,
				  .ns = 0, .stride = 1, .n = 1 };
}

static void expect_run(const struct meta_run *runs, uint32_t i,
		       struct meta_run want)
{
	const struct meta_run *r = &runs[i];

	cr_assert(eq(u64, r->seq, want.seq), "run %u: seq", i);
	cr_assert(eq(u64, r->family, want.family), "run %u: family", i);
	cr_assert(eq(u32, r->stream, want.stream), "run %u: stream", i);
	cr_assert(eq(u32, r->group, want.group), "run %u: group", i);
	cr_assert(eq(u32, r->page, want.page), "run %u: page", i);
	cr_assert(eq(u8, r->ns, want.ns), "run %u: ns", i);
	cr_assert(eq(u8, r->stride, want.stride), "run %u: stride", i);
	cr_assert(eq(u16, r->n, want.n), "run %u: n", i);
}

/* with_n - r covering n pages */
static struct meta_run with_n(struct meta_run r, uint16_t n)
{
	r.n = n;
	return r;
}

/* with_stride - r covering n pages, stride groups apart */
static struct meta_run with_stride(struct meta_run r, uint16_t n,
				   uint8_t stride)
{
	r.n = n;
	r.stride = stride;
	return r;
}

/* The first add into an empty array stores the slot as it is. */
Test(meta_run, first_add_into_empty_array)
{
	struct meta_run runs[2];
	uint32_t n = 0;

	meta_run_add(runs, &n, slot(7, 3, 40, 0));
	cr_assert(eq(u32, n, 1));
	expect_run(runs, 0, slot(7, 3, 40, 0));
}

/* Consecutive pages holding consecutive groups of one stream are one run;
 * it may start at any page and group. */
Test(meta_run, consecutive_pages_and_groups_merge)
{
	struct meta_run runs[8];
	uint32_t n = 0;

	for (uint32_t i = 0; i < 5; i++)
		meta_run_add(runs, &n, slot(7, 3, 40 + i, 2 + i));
	cr_assert(eq(u32, n, 1));
	expect_run(runs, 0, with_n(slot(7, 3, 40, 2), 5));
}

/* Each way a slot can fail to continue the last run starts a new run,
 * and the run before it keeps its length. */
Test(meta_run, any_difference_starts_a_new_run)
{
	/* the run so far: pages 0-1 hold groups 40-41 of (7, 7, 3, 0) */
	const struct meta_run other[] = {
		/* a gap in group, a gap in page */
		{ .seq = 7, .family = 7, .stream = 3, .group = 43, .page = 2,
		  .stride = 1, .n = 1 },
		{ .seq = 7, .family = 7, .stream = 3, .group = 42, .page = 3,
		  .stride = 1, .n = 1 },
		/* another seq, family, stream, ns */
		{ .seq = 8, .family = 7, .stream = 3, .group = 42, .page = 2,
		  .stride = 1, .n = 1 },
		{ .seq = 7, .family = 9, .stream = 3, .group = 42, .page = 2,
		  .stride = 1, .n = 1 },
		{ .seq = 7, .family = 7, .stream = 4, .group = 42, .page = 2,
		  .stride = 1, .n = 1 },
		{ .seq = 7, .family = 7, .stream = 3, .group = 42, .page = 2, .ns = 1,
		  .stride = 1, .n = 1 },
		/* the group goes back; the same page again */
		{ .seq = 7, .family = 7, .stream = 3, .group = 39, .page = 2,
		  .stride = 1, .n = 1 },
		{ .seq = 7, .family = 7, .stream = 3, .group = 42, .page = 1,
		  .stride = 1, .n = 1 },
	};

	for (size_t k = 0; k < sizeof(other) / sizeof(other[0]); k++) {
		struct meta_run runs[4];
		uint32_t n = 0;

		meta_run_add(runs, &n, slot(7, 3, 40, 0));
		meta_run_add(runs, &n, slot(7, 3, 41, 1));
		meta_run_add(runs, &n, other[k]);
		cr_assert(eq(u32, n, 2), "case %zu", k);
		expect_run(runs, 0, with_n(slot(7, 3, 40, 0), 2));
		expect_run(runs, 1, other[k]);
	}
}

/* A page with two owners (a fork's shared page, as the cleaner records
 * it): the second owner is a run of its own, the first owner's run is
 * untouched, and the first owner's next page cannot reach back past the
 * second owner's run: it starts a third. */
Test(meta_run, second_owner_of_a_page_starts_a_new_run)
{
	struct meta_run runs[8];
	struct meta_run child = { .seq = 12, .family = 7, .stream = 3,
				  .group = 41, .page = 1, .stride = 1, .n = 1 };
	struct meta_run child2 = child;
	uint32_t n = 0;

	meta_run_add(runs, &n, slot(7, 3, 40, 0));
	meta_run_add(runs, &n, slot(7, 3, 41, 1));
	meta_run_add(runs, &n, child);
	cr_assert(eq(u32, n, 2));
	expect_run(runs, 0, with_n(slot(7, 3, 40, 0), 2));
	expect_run(runs, 1, child);
	/* page 2: both owners again */
	child2.group = 42;
	child2.page = 2;
	meta_run_add(runs, &n, slot(7, 3, 42, 2));
	meta_run_add(runs, &n, child2);
	cr_assert(eq(u32, n, 4));
	expect_run(runs, 0, with_n(slot(7, 3, 40, 0), 2));
	expect_run(runs, 1, child);
	expect_run(runs, 2, slot(7, 3, 42, 2));
	expect_run(runs, 3, child2);
}

/* n is 16 bits: a run stops at META_RUN_MAX pages and the next page
 * starts a new run, which goes on merging. */
Test(meta_run, a_run_stops_at_meta_run_max)
{
	struct meta_run runs[4];
	uint32_t n = 0, total = META_RUN_MAX + 2u;

	for (uint32_t i = 0; i < total; i++)
		meta_run_add(runs, &n, slot(7, 3, 100 + i, i));
	cr_assert(eq(u32, n, 2));
	expect_run(runs, 0, with_n(slot(7, 3, 100, 0), META_RUN_MAX));
	expect_run(runs, 1, with_n(slot(7, 3, 100 + META_RUN_MAX, META_RUN_MAX), 2));
}

/* A stream's groups go round the stripes, so one stripe's segment holds
 * every n_stripes-th: the second page sets the run's stride, later pages
 * must keep it. */
Test(meta_run, a_stripe_stride_merges)
{
	struct meta_run runs[4];
	uint32_t n = 0;

	for (uint32_t i = 0; i < 4; i++)
		meta_run_add(runs, &n, slot(7, 3, 10 + 3 * i, i));
	cr_assert(eq(u32, n, 1));
	expect_run(runs, 0, with_stride(slot(7, 3, 10, 0), 4, 3));
	meta_run_add(runs, &n, slot(7, 3, 24, 4)); /* 22 would continue */
	cr_assert(eq(u32, n, 2));
	expect_run(runs, 0, with_stride(slot(7, 3, 10, 0), 4, 3));
	expect_run(runs, 1, slot(7, 3, 24, 4));
}

/* The stride is 8 bits: a run of one page takes a step of
 * META_STRIDE_MAX groups, not one more. */
Test(meta_run, strides_up_to_meta_stride_max)
{
	struct meta_run runs[4];
	uint32_t n = 0;

	meta_run_add(runs, &n, slot(7, 3, 5, 0));
	meta_run_add(runs, &n, slot(7, 3, 5 + META_STRIDE_MAX, 1));
	cr_assert(eq(u32, n, 1));
	expect_run(runs, 0, with_stride(slot(7, 3, 5, 0), 2, META_STRIDE_MAX));
	n = 0;
	meta_run_add(runs, &n, slot(7, 3, 5, 0));
	meta_run_add(runs, &n, slot(7, 3, 6 + META_STRIDE_MAX, 1));
	cr_assert(eq(u32, n, 2));
	expect_run(runs, 0, slot(7, 3, 5, 0));
	expect_run(runs, 1, slot(7, 3, 6 + META_STRIDE_MAX, 1));
}

/* A run never wraps past group 2^32 - 1 (open would refuse the record):
 * a page whose group is below the run's last, modulo 2^32 the next one,
 * starts a new run. */
Test(meta_run, no_run_wraps_past_the_last_group)
{
	struct meta_run runs[4];
	uint32_t n = 0;

	meta_run_add(runs, &n, slot(7, 3, UINT32_MAX - 1, 0));
	meta_run_add(runs, &n, slot(7, 3, 2, 1)); /* 4 on, modulo 2^32 */
	cr_assert(eq(u32, n, 2));
	expect_run(runs, 0, slot(7, 3, UINT32_MAX - 1, 0));
	expect_run(runs, 1, slot(7, 3, 2, 1));
	n = 0;
	meta_run_add(runs, &n, slot(7, 3, UINT32_MAX - 1, 0));
	meta_run_add(runs, &n, slot(7, 3, UINT32_MAX, 1));
	meta_run_add(runs, &n, slot(7, 3, 0, 2)); /* would wrap */
	cr_assert(eq(u32, n, 2));
	expect_run(runs, 0, with_n(slot(7, 3, UINT32_MAX - 1, 0), 2));
	expect_run(runs, 1, slot(7, 3, 0, 2));
	cr_assert(meta_run_ok(&runs[0], 3));
}
