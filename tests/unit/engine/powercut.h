/*
 * powercut.h - simulated power cuts of a file store, for the crash tests.
 *
 * A process killed with SIGKILL loses nothing the kernel accepted; a
 * machine that loses power also loses what the disk had not made durable.
 * These helpers make the second out of the first:
 *
 *  - in the writing process (a child that will be killed), powercut_arm
 *    installs a system-call table at the file backend's seam (ftl/sysio.h)
 *    that, before each write or hole punch, appends the bytes about to be
 *    replaced to a journal file, and after each successful fdatasync
 *    appends a mark that the file's earlier writes are durable; and it
 *    sets the catalog's durable-commit hook to note the length of each
 *    write-ahead log of the catalog at that moment;
 *  - once the writer is dead, powercut_apply (in another process) plays a
 *    disk cache that lost power: every page written since its file's last
 *    fdatasync ends up holding, at random, its durable bytes, its newest
 *    bytes, the bytes of any write in between, or a mix of two of them
 *    sector by sector (a torn page); a buffered write (the flash
 *    emulator's image, written in pieces smaller than a page) keeps its
 *    bytes, loses them, or loses a run of its sectors; every log is cut at
 *    a random length no shorter than its last durable one, sometimes
 *    followed by garbage.
 *
 * The SYNCED mark and the header are left as the writer left them: the mark
 * may lag the catalog after any cut, and the header is written once, synced.
 */
#ifndef KVF_TEST_POWERCUT_H
#define KVF_TEST_POWERCUT_H

#include <stddef.h>
#include <stdint.h>

/* What one cut did. */
struct powercut_stats {
	uint64_t pages;     /* pages (and buffered writes) written since
			     * their file's last sync */
	uint64_t kept;      /* ... left with their newest bytes */
	uint64_t reverted;  /* ... put back to older bytes */
	uint64_t torn;      /* ... left as a sector mix of two versions */
	uint64_t logs_cut;  /* catalog logs shortened */
	uint64_t log_bytes; /* unsynced log bytes dropped */
};

/*
 * powercut_arm - journal to `journal` (created or truncated) the writes of
 * the store in `store_dir` from now on.  Call before kvf_open in the
 * process that will be killed; it stays armed until the process ends.
 * Returns 0, or -1 with errno.
 */
int powercut_arm(const char *journal, const char *store_dir);

/*
 * powercut_apply - cut the power under the store the journal describes,
 * choosing with seed; the writer must be dead.  No journal (the writer
 * died before it armed) cuts nothing.  Returns 0, or -1 with a message in
 * why.
 */
int powercut_apply(const char *journal, uint64_t seed,
		   struct powercut_stats *out, char *why, size_t why_cap);

/*
 * powercut_lose_data_keep_logs - from now on a cut puts every unsynced
 * data write back to its durable bytes and keeps every log byte: the one
 * outcome that most often breaks a store (the catalog remembers what the
 * disk lost), for tests that need it for sure.  0 turns it off.
 */
void powercut_lose_data_keep_logs(int on);

#endif /* KVF_TEST_POWERCUT_H */
