/* What the journal tests share (test_persist.c, test_journal_copies.c): pushes to journal,
 * a replay visitor that collects them, and byte-level damage. Failures are cmocka assertions. */
#ifndef GA_JOURNAL_FIXTURE_H
#define GA_JOURNAL_FIXTURE_H

#include <stdint.h>
#include <sys/types.h>

#include "persist/journal.h"

/* A push of one chunk of `count` fp32 values (value, value + 1, ...) of tensor "w" by `rank`
 * for `step`, as the network would deliver it. */
ga_push *make_push(uint64_t step, uint32_t rank, float value, size_t count);

/* What a replay visited: each COMMIT's seq and first value (at most 16). */
typedef struct seen {
    int n;
    uint64_t seq[16];
    float first[16];
} seen;
/* A ga_journal_visit taking a seen *: every record must be a COMMIT of step seq - 1. */
ga_status collect(void *arg, const ga_journal_record *r, char *why, size_t cap);

off_t file_size(const char *path);
void flip_byte(const char *path, off_t at); /* xor 0x40 */

/* A journal opened in dir (PUSH sync, `copies` files) with `count` commits of 300 elements,
 * step s holding 10 s and seq s + 1. */
void journal_of_commits(ga_journal *j, const char *dir, uint64_t count, uint32_t copies);

#endif
