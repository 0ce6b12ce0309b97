/*
 * seq_int.h - what the sequence files of engine/ share (seq.c, the table;
 * seq_calls.c, the public calls): the one table operation kvf_seq_free
 * needs apart from seq_remove.  Streams and records are in seq_stream.c;
 * the engine's entry points in engine/sequences/seq.h.
 */
#ifndef KVF_ENGINE_SEQ_INT_H
#define KVF_ENGINE_SEQ_INT_H

#include "engine/sequences/seq.h"

/* seq_table_remove - take seq out of the table; the table's reference
 * passes to the caller.  Takes seqtab.lock for writing. */
void seq_table_remove(kvf_store *st, struct seq *seq);

#endif /* KVF_ENGINE_SEQ_INT_H */
