/* A job's push journal: every change that is acknowledged before a checkpoint covers it (job
 * creation, tensor creation, push commits, short step closes, member changes) is appended here
 * before its ack, so a restarted server rebuilds exactly what it had acknowledged from the
 * newest checkpoint plus the journal (core_persist.c). Loop thread for appends; replay runs at
 * start-up; pruning may run on a thread-pool task (it never touches the open segment).
 *
 * Files: <job dir>/journal-<counter:10>-<first seq:20>.log, appended in counter order. A record
 * is [u32 type][u32 0][u64 seq][u64 body length][body][u32 crc32c of all before it], little
 * endian. seq is the version that will include the record: a checkpoint of version V covers
 * every record with seq <= V. Every record of a segment has seq <= the next segment's first seq
 * + `ahead`, the job's staleness (a push ahead of the open step is journaled with the version of
 * its own step: core_persist.c), so a segment may go once the oldest kept checkpoint's version
 * reaches the next one's + ahead. Segments
 * are written with direct I/O (dfile.h): one left by a killed server may end in fewer than 4096
 * zero bytes after its last record, which replay reads as its end.
 *
 * With two copies (--journal-copies 2) every segment has a twin, journal-<counter>-<first>.copy,
 * written with the same bytes at the same offsets before the ack: a record the replay cannot
 * read in the .log (a damaged sector, or one the disk cannot read) is read from the .copy at the
 * same offset, and only a record that neither holds is a torn tail or damage. */
#ifndef GA_JOURNAL_H
#define GA_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bundle/bundle.h"
#include "dfile.h"
#include "ga_status.h"
#include "journal_sync.h"


typedef enum ga_journal_type {
    GA_JOURNAL_JOB = 1,    /* body: a packed JoinRequest (job and config) */
    GA_JOURNAL_INIT = 2,   /* body: the InitTensors chunks that created tensors */
    GA_JOURNAL_COMMIT = 3, /* body: one committed push, chunk by chunk */
    GA_JOURNAL_CLOSE = 4,  /* body: empty; the sync step seq - 1 closed with what it had */
    GA_JOURNAL_MEMBER = 5, /* body: ga_journal_member; a rank left, came back, or changed hands */
} ga_journal_type;

/* The body of a MEMBER record: rank `rank` is now held by `incarnation` and has left (left 1;
 * left 2: as failed, its open step still waiting for it), or is back after a Leave or taken over
 * by a new incarnation (left 0). A rank's first join and its worker's rejoins are not journaled:
 * a worker rejoins a restarted server by itself. */
typedef struct ga_journal_member {
    uint32_t rank;
    uint32_t left;
    uint64_t incarnation;
} ga_journal_member;

#define GA_JOURNAL_COPIES_MAX 2u

typedef struct ga_journal {
    char *dir;        /* the job's directory (owned) */
    ga_dfile file;    /* the open segment (direct I/O); file.fd -1 when none */
    ga_dfile copy;    /* its twin (copies 2); copy.fd -1 otherwise */
    uint64_t counter; /* of the open segment */
    ga_journal_sync sync;
    uint32_t copies;  /* 1 or 2 */
} ga_journal;

#define GA_JOURNAL_CLOSED ((ga_journal){.file.fd = -1, .copy.fd = -1})

/* Opens a new segment in dir (created if missing) after any existing ones, starting at
 * first_seq, written in `copies` files (1 or 2). Errors GA_E_IO / GA_E_NOMEM with a message;
 * *j is then closed (fd -1). */
ga_status ga_journal_open(ga_journal *j, const char *dir, uint64_t first_seq, ga_journal_sync sync, uint32_t copies,
                          char *why, size_t cap);
/* Starts a new segment at first_seq (a checkpoint of version first_seq - 1 was queued). On
 * error the current segment stays open. */
ga_status ga_journal_rotate(ga_journal *j, uint64_t first_seq, char *why, size_t cap);
void ga_journal_close(ga_journal *j); /* idempotent */

/* Appends. Each writes the whole record to every copy or reports GA_E_IO (a partial record is cut
 * off by its checksum at replay and was never acknowledged). PUSH sync mode fsyncs here. */
ga_status ga_journal_job(ga_journal *j, uint64_t seq, const char *job, const Gradagg__V1__JobConfig *config, char *why,
                         size_t cap);
ga_status ga_journal_init(ga_journal *j, uint64_t seq, const ga_init *init, char *why, size_t cap);
ga_status ga_journal_commit(ga_journal *j, uint64_t seq, const ga_push *push, char *why, size_t cap);
ga_status ga_journal_close_step(ga_journal *j, uint64_t seq, char *why, size_t cap);
ga_status ga_journal_member_change(ga_journal *j, uint64_t seq, const ga_journal_member *m, char *why, size_t cap);
/* fdatasync of the open segment and its copy (STEP mode calls it at each close). */
ga_status ga_journal_flush(ga_journal *j, char *why, size_t cap);

/* Replay: calls visit for every intact record with seq > after, segment after segment, in the
 * order written. A record that fails its checks (or cannot be read) in a segment whose copy holds
 * it intact at the same offset is taken from the copy (end->from_copy counts those visited); the copy is
 * read only there, or alone when the segment's file is gone or cannot be opened. A record that fails in every copy ends its segment, and is one of two things:
 *  - a torn tail, the trace of a write a crash cut short (never acknowledged): nothing intact
 *    follows it in its segment, and the next segment (if any) starts at most one seq past the
 *    last intact record (the restart after that crash knew of nothing beyond it). The replay
 *    goes on with the next segment; end->torn counts these.
 *  - damage: an intact record follows it in the same segment (in either copy), the rest of the
 *    segment cannot be read (an I/O error: a bad sector), or the next segment starts later
 *    than that (records the server once had are unreadable). When the segment holds records
 *    the replay needs (seq > after), the replay stops there: end->damaged, end->where. Damage
 *    in a segment a checkpoint covers is only counted (end->damaged_covered).
 * visit's error stops the replay and is returned. */
typedef struct ga_journal_end {
    uint64_t records;         /* records visited */
    uint64_t from_copy;       /* records visited that their segment had lost, read from its copy */
    uint64_t torn;            /* segments that ended at a torn tail */
    uint64_t damaged_covered; /* damaged segments the replay did not need */
    bool damaged;             /* the replay stopped at damage it needed past */
    uint64_t last_seq;        /* damaged: the seq the segment had reached before it */
    char where[300];          /* damaged: "<segment> at byte N" */
} ga_journal_end;
typedef struct ga_journal_record {
    ga_journal_type type;
    uint64_t seq;
    const uint8_t *body;
    size_t len;
} ga_journal_record;
typedef ga_status (*ga_journal_visit)(void *arg, const ga_journal_record *r, char *why, size_t cap);
ga_status ga_journal_replay(const char *dir, uint64_t after, uint32_t ahead, ga_journal_visit visit, void *arg,
                            ga_journal_end *end, char *why, size_t cap);

/* Whether dir holds a segment that starts at or before seq (*found; false when it holds none). A
 * checkpoint of version v is always followed by a segment starting at v + 1 (the journal rotates
 * when the checkpoint is queued), so without one the records after v were removed. */
ga_status ga_journal_reaches(const char *dir, uint64_t seq, bool *found, char *why, size_t cap);

/* Deletes the segments (and their copies) whose every record has seq <= covered (the next
 * segment starts at or below covered - ahead). Never the newest segment. Returns how many went. */
ga_status ga_journal_prune(const char *dir, uint64_t covered, uint32_t ahead, size_t *removed, char *why, size_t cap);

/* Bodies back into bundles (owned by the caller) and messages. GA_E_PROTO when the body does
 * not parse; the bundle checks of bundle.h apply. */
ga_status ga_journal_decode_push(const ga_journal_record *r, ga_push **out, char *why, size_t cap);
ga_status ga_journal_decode_init(const ga_journal_record *r, ga_init **out, char *why, size_t cap);
ga_status ga_journal_decode_member(const ga_journal_record *r, ga_journal_member *out, char *why, size_t cap);
/* Returns owned (protobuf_c_message_free_unpacked with ga_wire_allocator). */
ga_status ga_journal_decode_job(const ga_journal_record *r, Gradagg__V1__JoinRequest **out, char *why, size_t cap);

#endif
