/* An append-only file written with direct I/O (O_DIRECT): the journal's segments and the
 * checkpoints. Their bytes are read back only at start-up, so they skip the page cache: a
 * buffered write copies every byte into page-cache pages, which is the dearest part of a push's
 * journaling, and on a VM whose host backs guest memory lazily fresh pages cost ~10x the copy
 * (docs/benchmarks.md, "the journal's direct writes": 400 MB buffered into a new file 0.84-1.15
 * CPU-s, direct 0.03-0.04 CPU-s, 3x less wall time). A container's page cache also counts
 * against its memory limit.
 *
 * Direct I/O writes whole aligned blocks, so bytes are staged in an aligned buffer; the last
 * partial block is written zero-padded and written again, with what follows, by the next commit
 * (the bytes it held are the same in both writes, so a torn rewrite cannot damage them). Until
 * ga_dfile_close or ga_dfile_trim the file may end in fewer than GA_DFILE_ALIGN zero bytes after
 * the committed ones: readers of a file left by a killed process treat such a tail as padding.
 * Where the file system refuses direct I/O the same writes go through the page cache, which
 * ga_dfile_sync then drops. One thread at a time per file; blocking. */
#ifndef GA_DFILE_H
#define GA_DFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ga_status.h"

#define GA_DFILE_ALIGN 4096u           /* offsets, lengths and memory of every write */
#define GA_DFILE_STAGE ((size_t)2 << 20) /* bytes staged per write */

typedef struct ga_dfile {
    int fd;          /* -1 when closed */
    bool direct;     /* O_DIRECT is on */
    uint64_t size;   /* committed bytes: the file's length once trimmed */
    uint64_t at;     /* file offset of stage[0] (block aligned) */
    size_t fill;     /* bytes in stage: the committed last partial block, then uncommitted ones */
    uint8_t *stage;  /* GA_DFILE_STAGE bytes, aligned */
    uint8_t *tail;   /* GA_DFILE_ALIGN bytes: the committed last partial block, for ga_dfile_cut */
    void *mem;       /* the allocation behind stage and tail */
    char *path;      /* for messages (owned) */
} ga_dfile;

/* Creates path (flags: O_EXCL or O_TRUNC, with mode) for writing, and for ga_dfile_cut's reads.
 * direct false skips the try of O_DIRECT (tests of the fallback). Errors GA_E_IO (naming the
 * path) or GA_E_NOMEM; *f is then closed. */
ga_status ga_dfile_create(ga_dfile *f, const char *path, int flags, unsigned mode, bool direct, char *why, size_t cap);
/* Adds n bytes after the staged ones; full stages go to the file. On error call ga_dfile_cut. */
ga_status ga_dfile_write(ga_dfile *f, const void *p, size_t n, char *why, size_t cap);
/* Writes what is staged: every byte written since the last commit is then in the file (on the
 * device with direct I/O, not yet flushed from its cache). On error call ga_dfile_cut. */
ga_status ga_dfile_commit(ga_dfile *f, char *why, size_t cap);
/* Cuts the file back to size bytes (at most the committed size, which it becomes) and drops
 * every byte written after them, staged or committed. false when the file could not be cut or
 * its last partial block not read back: the file then holds bytes past size, and its next
 * writes would not know the block they rewrite (close it). */
bool ga_dfile_cut(ga_dfile *f, uint64_t size);
/* Cuts the file to its committed bytes (drops the padding of the last block). */
ga_status ga_dfile_trim(ga_dfile *f, char *why, size_t cap);
/* fdatasync; through the page cache, then drops the synced pages. */
ga_status ga_dfile_sync(ga_dfile *f, char *why, size_t cap);
/* Trims (errors ignored: the padding is harmless), closes and frees. Idempotent. */
void ga_dfile_close(ga_dfile *f);

#endif
