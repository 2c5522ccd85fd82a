/* The push journal (journal.h): segment files, record framing, appends, replay and pruning,
 * and the record bodies. */
#define _GNU_SOURCE /* sync_file_range */
#include "journal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "byte_cursor.h"
#include "crc32c.h"
#include "fileio.h"
#include "ga_alloc.h"
#include "ga_wire.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the journal is written in host order: little endian");

#define HEADER_BYTES 24u
#define PREFIX "journal-"
#define SUFFIX ".log"
#define COPY_SUFFIX ".copy"
/* A body longer than this is damage, not a record (a push stream is at most 16 TiB by config). */
#define MAX_BODY ((uint64_t)1 << 44)

typedef struct header {
    uint32_t type, zero;
    uint64_t seq, len;
} header;
_Static_assert(sizeof(header) == HEADER_BYTES, "packed header");

/* ---- segments ---- */

/* A segment, named by its counter and first seq, whichever of its files are there. */
typedef struct seg_id {
    uint64_t counter, first;
} seg_id;

static bool parse_name(const char *name, seg_id *id)
{
    char tail[8];
    return sscanf(name, PREFIX "%10" SCNu64 "-%20" SCNu64 "%7s", &id->counter, &id->first, tail) == 3 &&
           (strcmp(tail, SUFFIX) == 0 || strcmp(tail, COPY_SUFFIX) == 0);
}

/* The segments in dir, in counter order: those with a .log, a .copy or both (*out owned). */
static ga_status list_segments(const char *dir, seg_id **out, size_t *n, char *why, size_t cap)
{
    char **names;
    size_t count, k = 0;
    GA_CHECK(ga_file_list(dir, PREFIX, "", &names, &count, why, cap));
    seg_id *ids = ga_malloc((count + 1) * sizeof *ids);
    if (!ids) {
        ga_file_names_free(names, count);
        return ga_status_fail(GA_E_NOMEM, why, cap, "out of memory listing %s", dir);
    }
    for (size_t i = 0; i < count; i++) { /* sorted by name: a segment's two files are neighbours */
        seg_id id;
        if (!parse_name(names[i], &id)) continue;
        if (k && ids[k - 1].counter == id.counter && ids[k - 1].first == id.first) continue;
        ids[k++] = id;
    }
    ga_file_names_free(names, count);
    *out = ids, *n = k;
    return GA_OK;
}

static void segment_path(char *out, size_t cap, const char *dir, uint64_t counter, uint64_t first, const char *suffix)
{
    snprintf(out, cap, "%s/" PREFIX "%010" PRIu64 "-%020" PRIu64 "%s", dir, counter, first, suffix);
}

static void close_files(ga_journal *j)
{
    ga_dfile_close(&j->file);
    ga_dfile_close(&j->copy);
}

static ga_status open_segment(ga_journal *j, uint64_t counter, uint64_t first, char *why, size_t cap)
{
    char path[4096], copy_path[4096];
    segment_path(path, sizeof path, j->dir, counter, first, SUFFIX);
    segment_path(copy_path, sizeof copy_path, j->dir, counter, first, COPY_SUFFIX);
    ga_journal next = GA_JOURNAL_CLOSED;
    ga_status st = ga_dfile_create(&next.file, path, O_EXCL, 0640, true, why, cap);
    if (st == GA_OK && j->copies > 1) st = ga_dfile_create(&next.copy, copy_path, O_EXCL, 0640, true, why, cap);
    if (st == GA_OK) st = ga_file_sync_dir(j->dir, why, cap); /* the segment itself survives a crash */
    if (st != GA_OK) {
        bool made = next.file.fd >= 0, copy_made = next.copy.fd >= 0;
        close_files(&next);
        if (made) unlink(path);
        if (copy_made) unlink(copy_path);
        return st;
    }
    close_files(j);
    j->file = next.file, j->copy = next.copy, j->counter = counter;
    return GA_OK;
}


ga_status ga_journal_open(ga_journal *j, const char *dir, uint64_t first_seq, ga_journal_sync sync, uint32_t copies,
                          char *why, size_t cap)
{
    *j = GA_JOURNAL_CLOSED;
    j->sync = sync;
    j->copies = copies < 1 ? 1 : copies > GA_JOURNAL_COPIES_MAX ? GA_JOURNAL_COPIES_MAX : copies;
    GA_CHECK(ga_file_mkdirs(dir, why, cap));
    if (!(j->dir = ga_strdup(dir))) return ga_status_fail(GA_E_NOMEM, why, cap, "out of memory opening a journal");
    seg_id *ids;
    size_t count;
    ga_status st = list_segments(dir, &ids, &count, why, cap);
    if (st == GA_OK) {
        st = open_segment(j, count ? ids[count - 1].counter + 1 : 1, first_seq, why, cap);
        ga_free(ids);
    }
    if (st != GA_OK) ga_journal_close(j);
    return st;
}

ga_status ga_journal_rotate(ga_journal *j, uint64_t first_seq, char *why, size_t cap)
{
    return open_segment(j, j->counter + 1, first_seq, why, cap);
}

void ga_journal_close(ga_journal *j)
{
    close_files(j);
    ga_free(j->dir);
    *j = GA_JOURNAL_CLOSED;
}

ga_status ga_journal_flush(ga_journal *j, char *why, size_t cap)
{
    if (j->file.fd >= 0) GA_CHECK(ga_dfile_sync(&j->file, why, cap));
    return j->copy.fd < 0 ? GA_OK : ga_dfile_sync(&j->copy, why, cap);
}

/* ---- appends ---- */

/* Writes one record whose body is iov[1..n-1) (iov[0] and iov[n-1] are left for the header and
 * the checksum), to the segment and then to its copy: a copy's record is whole only once the
 * segment's is (replay relies on it). */
static ga_status append(ga_journal *j, ga_journal_type type, uint64_t seq, struct iovec *iov, int n, char *why,
                        size_t cap)
{
    ga_dfile *f = &j->file, *twin = j->copy.fd >= 0 ? &j->copy : NULL;
    if (f->fd < 0) return ga_status_fail(GA_E_IO, why, cap, "the journal is not open");
    header h = {(uint32_t)type, 0, seq, 0};
    for (int i = 1; i < n - 1; i++) h.len += iov[i].iov_len;
    iov[0] = (struct iovec){&h, sizeof h};
    uint64_t start = f->size;
    uint32_t crc = 0;
    ga_status st = GA_OK;
    /* One pass per piece: a payload chunk is summed and staged while it is in the cache. */
    for (int i = 0; i < n - 1 && st == GA_OK; i++) {
        crc = ga_crc32c(crc, iov[i].iov_base, iov[i].iov_len);
        st = ga_dfile_write(f, iov[i].iov_base, iov[i].iov_len, why, cap);
        if (st == GA_OK && twin) st = ga_dfile_write(twin, iov[i].iov_base, iov[i].iov_len, why, cap);
    }
    iov[n - 1] = (struct iovec){&crc, sizeof crc};
    if (st == GA_OK) st = ga_dfile_write(f, iov[n - 1].iov_base, iov[n - 1].iov_len, why, cap);
    if (st == GA_OK && twin) st = ga_dfile_write(twin, iov[n - 1].iov_base, iov[n - 1].iov_len, why, cap);
    if (st == GA_OK) st = ga_dfile_commit(f, why, cap);
    if (st == GA_OK && twin) st = ga_dfile_commit(twin, why, cap);
    if (st == GA_OK && j->sync == GA_JOURNAL_SYNC_PUSH) st = ga_journal_flush(j, why, cap);
    /* STEP mode through the page cache (no direct I/O here): start this record's writeback now
     * (no wait), so the close's sync waits only for the last pushes. Advice. */
    if (st == GA_OK && j->sync == GA_JOURNAL_SYNC_STEP) {
        if (!f->direct) (void)sync_file_range(f->fd, (off_t)start, 0, SYNC_FILE_RANGE_WRITE);
        if (twin && !twin->direct) (void)sync_file_range(twin->fd, (off_t)start, 0, SYNC_FILE_RANGE_WRITE);
    }
    if (st != GA_OK) {
        /* Cut the record off: a partial one would hide later records (replay ends a segment at
         * its first bad record), and a whole one whose sync failed belongs to a call that is
         * refused, whose sender keeps the gradients and sends them again: replayed, they would
         * count twice. Failing that, later records go to a new segment; failing that too, the
         * journal takes nothing more, so nothing is acknowledged behind the damage. */
        bool cut = ga_dfile_cut(f, start);
        if (twin && !ga_dfile_cut(twin, start)) cut = false;
        if (!cut) {
            char ignored[64];
            if (ga_journal_rotate(j, seq, ignored, sizeof ignored) != GA_OK) close_files(j);
        }
        return st;
    }
    return GA_OK;
}

ga_status ga_journal_job(ga_journal *j, uint64_t seq, const char *job, const Gradagg__V1__JobConfig *config, char *why,
                         size_t cap)
{
    Gradagg__V1__JoinRequest req = GRADAGG__V1__JOIN_REQUEST__INIT;
    req.job = (char *)job;
    req.config = (Gradagg__V1__JobConfig *)config;
    size_t len = protobuf_c_message_get_packed_size(&req.base);
    uint8_t *buf = ga_malloc(len + 1);
    if (!buf) return ga_status_fail(GA_E_NOMEM, why, cap, "out of memory journaling job '%s'", job);
    protobuf_c_message_pack(&req.base, buf);
    struct iovec iov[3] = {{0}, {buf, len}, {0}};
    ga_status st = append(j, GA_JOURNAL_JOB, seq, iov, 3, why, cap);
    ga_free(buf);
    return st;
}

ga_status ga_journal_init(ga_journal *j, uint64_t seq, const ga_init *init, char *why, size_t cap)
{
    /* [u32 chunks] then per chunk [u64 length][packed InitChunk]. */
    size_t total = 4;
    for (size_t i = 0; i < init->count; i++)
        total += 8 + protobuf_c_message_get_packed_size(&init->parts[i].chunk->base);
    uint8_t *buf = ga_malloc(total), *p = buf;
    if (!buf) return ga_status_fail(GA_E_NOMEM, why, cap, "out of memory journaling an init");
    uint32_t count = (uint32_t)init->count;
    memcpy(p, &count, 4), p += 4;
    for (size_t i = 0; i < init->count; i++) {
        uint64_t len = protobuf_c_message_get_packed_size(&init->parts[i].chunk->base);
        memcpy(p, &len, 8), p += 8;
        p += protobuf_c_message_pack(&init->parts[i].chunk->base, p);
    }
    struct iovec iov[3] = {{0}, {buf, total}, {0}};
    ga_status st = append(j, GA_JOURNAL_INIT, seq, iov, 3, why, cap);
    ga_free(buf);
    return st;
}

/* Per part: [u32 header length][u64 payload length][packed PushChunk without its payload], then
 * the payload straight from the bundle (no copy). */
typedef struct part_head {
    uint32_t hlen;
    uint64_t plen;
} __attribute__((packed)) part_head;

ga_status ga_journal_commit(ga_journal *j, uint64_t seq, const ga_push *push, char *why, size_t cap)
{
    size_t n = push->count, heads_bytes = 0;
    for (size_t i = 0; i < n; i++) {
        Gradagg__V1__PushChunk c = *push->parts[i].chunk;
        c.payload.data = NULL, c.payload.len = 0;
        heads_bytes += sizeof(part_head) + protobuf_c_message_get_packed_size(&c.base);
    }
    uint8_t *heads = ga_malloc(heads_bytes + 4);
    struct iovec *iov = ga_malloc((2 * n + 3) * sizeof *iov);
    if (!heads || !iov) {
        ga_free(heads), ga_free(iov);
        return ga_status_fail(GA_E_NOMEM, why, cap, "out of memory journaling a push");
    }
    uint32_t count = (uint32_t)n;
    memcpy(heads, &count, 4);
    iov[1] = (struct iovec){heads, 4};
    uint8_t *p = heads + 4;
    for (size_t i = 0; i < n; i++) {
        const Gradagg__V1__PushChunk *chunk = push->parts[i].chunk;
        Gradagg__V1__PushChunk c = *chunk;
        c.payload.data = NULL, c.payload.len = 0;
        part_head ph = {(uint32_t)protobuf_c_message_get_packed_size(&c.base), chunk->payload.len};
        uint8_t *start = p;
        memcpy(p, &ph, sizeof ph), p += sizeof ph;
        p += protobuf_c_message_pack(&c.base, p);
        iov[2 + 2 * i] = (struct iovec){start, (size_t)(p - start)};
        iov[3 + 2 * i] = (struct iovec){chunk->payload.data, chunk->payload.len};
    }
    ga_status st = append(j, GA_JOURNAL_COMMIT, seq, iov, (int)(2 * n + 3), why, cap);
    ga_free(heads), ga_free(iov);
    return st;
}

ga_status ga_journal_close_step(ga_journal *j, uint64_t seq, char *why, size_t cap)
{
    struct iovec iov[2] = {{0}, {0}};
    GA_CHECK(append(j, GA_JOURNAL_CLOSE, seq, iov, 2, why, cap));
    return j->sync == GA_JOURNAL_SYNC_STEP ? ga_journal_flush(j, why, cap) : GA_OK;
}

ga_status ga_journal_member_change(ga_journal *j, uint64_t seq, const ga_journal_member *m, char *why, size_t cap)
{
    ga_journal_member body = *m; /* the layout is the record's: 16 bytes, no padding */
    struct iovec iov[3] = {{0}, {&body, sizeof body}, {0}};
    return append(j, GA_JOURNAL_MEMBER, seq, iov, 3, why, cap);
}

/* ---- replay ---- */

/* pread of exactly n bytes at off: 0, or 1 when the file ends first, or -1 when it cannot be read. */
static int read_at(int fd, void *buf, size_t n, uint64_t off)
{
    uint8_t *p = buf;
    while (n > 0) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) return 1;
        p += r, n -= (size_t)r, off += (uint64_t)r;
    }
    return 0;
}

/* Whether the `left` bytes of fd from `at` on (fewer than a block) are the zero padding of a
 * segment whose writer was killed before it trimmed it (dfile.h). */
static bool padding(int fd, uint64_t at, uint64_t left)
{
    uint8_t tail[GA_DFILE_ALIGN];
    if (left >= GA_DFILE_ALIGN || read_at(fd, tail, left, at) != 0) return false;
    for (uint64_t i = 0; i < left; i++)
        if (tail[i]) return false;
    return true;
}

/* Whether a record header (its first 24 bytes) could start a record of at most `left` bytes. */
static bool plausible(const header *h, uint64_t left)
{
    return h->type >= GA_JOURNAL_JOB && h->type <= GA_JOURNAL_MEMBER && h->zero == 0 && left >= HEADER_BYTES + 4 &&
           h->len <= left - HEADER_BYTES - 4;
}

typedef enum read_result {
    READ_OK,         /* *h and *body (owned) hold the record */
    READ_END,        /* the file ends here, or only padding follows */
    READ_BAD,        /* the bytes here are no intact record */
    READ_UNREADABLE, /* the file cannot be read here (an I/O error) */
} read_result;

/* Reads the record at `at` of a file of `size` bytes. */
static read_result read_record(int fd, uint64_t at, uint64_t size, header *h, uint8_t **body)
{
    if (at > size) return READ_BAD; /* the file ends inside a record its copy holds */
    uint64_t left = size - at;
    if (left == 0 || padding(fd, at, left)) return READ_END;
    if (left < HEADER_BYTES + 4) return READ_BAD;
    int r = read_at(fd, h, sizeof *h, at);
    if (r != 0) return r < 0 ? READ_UNREADABLE : READ_BAD;
    if (!plausible(h, left) || h->len > MAX_BODY) return READ_BAD;
    uint8_t *b = ga_malloc(h->len ? h->len : 1);
    uint32_t crc;
    if (!b) return READ_BAD;
    r = read_at(fd, b, h->len, at + HEADER_BYTES);
    if (r == 0) r = read_at(fd, &crc, 4, at + HEADER_BYTES + h->len);
    if (r != 0 || crc != ga_crc32c(ga_crc32c(0, h, sizeof *h), b, h->len)) {
        ga_free(b);
        return r < 0 ? READ_UNREADABLE : READ_BAD;
    }
    *body = b;
    return READ_OK;
}

/* Whether anything at or after `from`, before `size`, shows that the bad record before it is
 * damage, not a torn tail: an intact record (its checksum right) starting there, or bytes that
 * cannot be read. Reads the rest of the segment once, in pieces; a candidate's body is checked
 * with pread. */
static bool damage_after(int fd, uint64_t from, uint64_t size)
{
    enum { PIECE = 1 << 20 };
    uint8_t *buf = ga_malloc(PIECE + HEADER_BYTES);
    if (!buf) return false;
    bool found = false;
    for (uint64_t base = from; base < size && !found; base += PIECE) {
        size_t want = (size_t)(size - base < PIECE + HEADER_BYTES ? size - base : PIECE + HEADER_BYTES);
        int r = read_at(fd, buf, want, base);
        if (r != 0) {
            found = r < 0;
            break;
        }
        for (size_t k = 0; k < PIECE && k + HEADER_BYTES <= want && !found; k++) {
            header h;
            memcpy(&h, buf + k, sizeof h);
            uint64_t at = base + k;
            if (!plausible(&h, size - at)) continue;
            uint32_t crc = ga_crc32c(0, &h, sizeof h), stored;
            uint8_t piece[4096];
            uint64_t pos = at + HEADER_BYTES, end = pos + h.len;
            int ok = 0;
            while (ok == 0 && pos < end) {
                size_t n = end - pos < sizeof piece ? (size_t)(end - pos) : sizeof piece;
                ok = read_at(fd, piece, n, pos);
                if (ok == 0) crc = ga_crc32c(crc, piece, n);
                pos += n;
            }
            if (ok == 0) ok = read_at(fd, &stored, 4, end);
            found = ok < 0 || (ok == 0 && stored == crc);
        }
    }
    ga_free(buf);
    return found;
}

/* One segment open for replay: its file and, when there is one, its copy. */
typedef struct segment {
    int fd, copy_fd; /* copy_fd -1: no copy */
    uint64_t size, copy_size;
    bool copy_only;  /* the segment's file is gone or cannot be opened: fd is its copy */
    char path[4096];
} segment;

static void segment_close(segment *g)
{
    if (g->fd >= 0) close(g->fd);
    if (g->copy_fd >= 0) close(g->copy_fd);
}

static int open_sized(const char *path, uint64_t *size)
{
    struct stat sb;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0 && fstat(fd, &sb) != 0) {
        close(fd);
        return -1;
    }
    if (fd >= 0) *size = (uint64_t)sb.st_size;
    return fd;
}

/* Opens segment id of dir and its copy if it has one; a segment whose file cannot be opened is
 * read from its copy alone. */
static ga_status segment_open(segment *g, const char *dir, seg_id id, char *why, size_t cap)
{
    *g = (segment){.fd = -1, .copy_fd = -1};
    char copy_path[4096];
    segment_path(g->path, sizeof g->path, dir, id.counter, id.first, SUFFIX);
    segment_path(copy_path, sizeof copy_path, dir, id.counter, id.first, COPY_SUFFIX);
    g->fd = open_sized(g->path, &g->size);
    int err = errno;
    g->copy_fd = open_sized(copy_path, &g->copy_size);
    if (g->fd < 0 && g->copy_fd >= 0) {
        g->fd = g->copy_fd, g->size = g->copy_size, g->copy_fd = -1, g->copy_only = true;
        snprintf(g->path, sizeof g->path, "%s", copy_path);
    }
    if (g->fd < 0) return ga_status_fail(GA_E_IO, why, cap, "opening %s: %s", g->path, strerror(err));
    return GA_OK;
}

/* The record at `at`: from the segment, else (bad or unreadable there) from its copy. */
static read_result segment_read(const segment *g, uint64_t at, header *h, uint8_t **body, read_result *copy_result,
                                bool *from_copy)
{
    read_result r = read_record(g->fd, at, g->size, h, body);
    *copy_result = READ_END;
    *from_copy = g->copy_only;
    if ((r == READ_BAD || r == READ_UNREADABLE) && g->copy_fd >= 0 && at <= g->copy_size) {
        *copy_result = read_record(g->copy_fd, at, g->copy_size, h, body);
        if (*copy_result == READ_OK) *from_copy = true, r = READ_OK;
        if (*copy_result == READ_END && at >= g->size) r = READ_END; /* both end here */
    }
    return r;
}

ga_status ga_journal_replay(const char *dir, uint64_t after, uint32_t ahead, ga_journal_visit visit, void *arg,
                            ga_journal_end *end, char *why, size_t cap)
{
    seg_id *ids;
    size_t count;
    *end = (ga_journal_end){0};
    GA_CHECK(list_segments(dir, &ids, &count, why, cap));
    ga_status st = GA_OK;
    for (size_t i = 0; i < count && st == GA_OK && !end->damaged; i++) {
        segment g;
        st = segment_open(&g, dir, ids[i], why, cap);
        if (st != GA_OK) break;
        uint64_t at = 0, last_seq = 0;
        header h;
        uint8_t *body;
        read_result r, copy_r;
        bool from_copy;
        while (st == GA_OK && (r = segment_read(&g, at, &h, &body, &copy_r, &from_copy)) == READ_OK) {
            at += HEADER_BYTES + h.len + 4;
            last_seq = h.seq;
            if (h.seq > after) {
                end->from_copy += from_copy;
                ga_journal_record rec = {(ga_journal_type)h.type, h.seq, body, (size_t)h.len};
                st = visit(arg, &rec, why, cap);
                end->records++;
            }
            ga_free(body);
        }
        if (st == GA_OK && r != READ_END) {
            /* The seq this segment had reached: its last intact record's, else the one before the
             * first it was opened for. */
            uint64_t first = ids[i].first, reached = last_seq ? last_seq : first ? first - 1 : 0;
            bool has_next = i + 1 < count;
            uint64_t next_first = has_next ? ids[i + 1].first : 0;
            bool damage = r == READ_UNREADABLE || copy_r == READ_UNREADABLE || damage_after(g.fd, at + 1, g.size) ||
                          (g.copy_fd >= 0 && damage_after(g.copy_fd, at + 1, g.copy_size)) ||
                          (has_next && next_first > reached + 1);
            bool needed = !has_next || next_first + ahead > after + 1;
            if (!damage) {
                end->torn++;
            } else if (!needed) {
                end->damaged_covered++;
            } else {
                end->damaged = true;
                end->last_seq = reached;
                snprintf(end->where, sizeof end->where, "%.250s at byte %" PRIu64, g.path, at);
            }
        }
        segment_close(&g);
    }
    ga_free(ids);
    return st;
}

ga_status ga_journal_reaches(const char *dir, uint64_t seq, bool *found, char *why, size_t cap)
{
    seg_id *ids;
    size_t count;
    GA_CHECK(list_segments(dir, &ids, &count, why, cap));
    *found = false;
    for (size_t i = 0; i < count; i++) *found |= ids[i].first <= seq;
    ga_free(ids);
    return GA_OK;
}

ga_status ga_journal_prune(const char *dir, uint64_t covered, uint32_t ahead, size_t *removed, char *why, size_t cap)
{
    seg_id *ids;
    size_t count, gone = 0;
    GA_CHECK(list_segments(dir, &ids, &count, why, cap));
    ga_status st = GA_OK;
    for (size_t i = 0; i + 1 < count && ids[i + 1].first + ahead <= covered && st == GA_OK; i++) {
        const char *suffixes[] = {COPY_SUFFIX, SUFFIX}; /* the copy first: never a copy alone */
        for (int k = 0; k < 2 && st == GA_OK; k++) {
            char path[4096];
            segment_path(path, sizeof path, dir, ids[i].counter, ids[i].first, suffixes[k]);
            if (unlink(path) != 0 && errno != ENOENT)
                st = ga_status_fail(GA_E_IO, why, cap, "removing %s: %s", path, strerror(errno));
        }
        gone += st == GA_OK;
    }
    ga_free(ids);
    if (gone && st == GA_OK) st = ga_file_sync_dir(dir, why, cap);
    *removed = gone;
    return st;
}

/* ---- bodies ---- */

ga_status ga_journal_decode_push(const ga_journal_record *r, ga_push **out, char *why, size_t cap)
{
    ga_cursor c = {r->body, r->len};
    uint32_t count;
    ga_push *push = NULL;
    if (!ga_cursor_take(&c, &count, 4) || count == 0) goto bad;
    for (uint32_t i = 0; i < count; i++) {
        part_head ph;
        if (!ga_cursor_take(&c, &ph, sizeof ph) || ph.hlen > c.left || ph.plen > c.left - ph.hlen) goto bad;
        Gradagg__V1__PushChunk *chunk =
            (Gradagg__V1__PushChunk *)protobuf_c_message_unpack(&gradagg__v1__push_chunk__descriptor,
                                                                &ga_wire_allocator, ph.hlen, c.p);
        if (!chunk) goto bad;
        c.p += ph.hlen, c.left -= ph.hlen;
        if (chunk->payload.len == 0 && ph.plen > 0) {
            /* The payload comes back into a fresh (aligned) block the message owns. */
            if (!(chunk->payload.data = ga_malloc(ph.plen))) {
                protobuf_c_message_free_unpacked(&chunk->base, &ga_wire_allocator);
                ga_push_free(push);
                return ga_status_fail(GA_E_NOMEM, why, cap, "out of memory replaying a push");
            }
            memcpy(chunk->payload.data, c.p, ph.plen);
            chunk->payload.len = ph.plen;
        }
        c.p += ph.plen, c.left -= ph.plen;
        ga_status st = ga_push_add(&push, chunk, SIZE_MAX, NULL, why, cap);
        if (st != GA_OK) {
            ga_push_free(push);
            return st;
        }
    }
    if (c.left) goto bad;
    *out = push;
    return GA_OK;
bad:
    ga_push_free(push);
    return ga_status_fail(GA_E_PROTO, why, cap, "journal record (seq %" PRIu64 ") is not a push", r->seq);
}

ga_status ga_journal_decode_init(const ga_journal_record *r, ga_init **out, char *why, size_t cap)
{
    ga_cursor c = {r->body, r->len};
    uint32_t count;
    ga_init *init = NULL;
    if (!ga_cursor_take(&c, &count, 4) || count == 0) goto bad;
    for (uint32_t i = 0; i < count; i++) {
        uint64_t len;
        if (!ga_cursor_take(&c, &len, 8) || len > c.left) goto bad;
        Gradagg__V1__InitChunk *chunk = (Gradagg__V1__InitChunk *)protobuf_c_message_unpack(
            &gradagg__v1__init_chunk__descriptor, &ga_wire_allocator, len, c.p);
        if (!chunk) goto bad;
        c.p += len, c.left -= len;
        ga_status st = ga_init_add(&init, chunk, SIZE_MAX, NULL, why, cap);
        if (st != GA_OK) {
            ga_init_free(init);
            return st;
        }
    }
    if (c.left) goto bad;
    *out = init;
    return GA_OK;
bad:
    ga_init_free(init);
    return ga_status_fail(GA_E_PROTO, why, cap, "journal record (seq %" PRIu64 ") is not an init", r->seq);
}

ga_status ga_journal_decode_member(const ga_journal_record *r, ga_journal_member *out, char *why, size_t cap)
{
    _Static_assert(sizeof(ga_journal_member) == 16, "the MEMBER body is 16 bytes");
    ga_journal_member m;
    if (r->len != sizeof m) return ga_status_fail(GA_E_PROTO, why, cap, "journal record (seq %" PRIu64 ") is not a member change", r->seq);
    memcpy(&m, r->body, sizeof m);
    if (m.left > 2 || m.incarnation == 0)
        return ga_status_fail(GA_E_PROTO, why, cap, "journal record (seq %" PRIu64 ") is not a member change", r->seq);
    *out = m;
    return GA_OK;
}

ga_status ga_journal_decode_job(const ga_journal_record *r, Gradagg__V1__JoinRequest **out, char *why, size_t cap)
{
    Gradagg__V1__JoinRequest *req = (Gradagg__V1__JoinRequest *)protobuf_c_message_unpack(
        &gradagg__v1__join_request__descriptor, &ga_wire_allocator, r->len, r->body);
    if (!req || !req->job || !req->job[0]) {
        if (req) protobuf_c_message_free_unpacked(&req->base, &ga_wire_allocator);
        return ga_status_fail(GA_E_PROTO, why, cap, "journal record (seq %" PRIu64 ") is not a job", r->seq);
    }
    *out = req;
    return GA_OK;
}
