/* persist/: what a job leaves on disk and how it is read back (docs/reliability.md). Blocking
 * file I/O: the core calls it from thread-pool tasks, or from the loop for small files and at
 * start-up. It knows the formats of its files, not the jobs: the core decides what is written
 * when (core/core_persist.c).
 *   journal.h       a job's push journal: acknowledged changes appended before their ack, replayed
 *                   at start-up, pruned behind checkpoints (its modes: journal_sync.h)
 *   checkpoint.h    a job's checkpoints: the store's buffers and the job's meta, written whole
 *   dfile.h         append-only files written with direct I/O (journal segments, checkpoints)
 *   fileio.h        whole reads, directory sync, mkdir -p, sorted listings
 * Private to the folder: crc32c.h (the records' checksum), byte_cursor.h (reading a record).
 * Outside persist/, include this header, not its parts.
 * May use: store (checkpoints hold its buffers), bundle (journal records hold pushes and
 * inits); kernels/, proto/ (records carry protobuf messages). */
#ifndef GA_PERSIST_H
#define GA_PERSIST_H

#include "checkpoint.h"
#include "dfile.h"
#include "fileio.h"
#include "journal.h"
#include "journal_sync.h"

#endif
