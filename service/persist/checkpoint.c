/* Checkpoint files (checkpoint.h): the writer, pruning, and the verifying loader. */
#include "checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "byte_cursor.h"
#include "crc32c.h"
#include "dfile.h"
#include "fileio.h"
#include "ga_alloc.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "checkpoints are written in host order: little endian");

#define MAGIC "GACKPT01"
#define END_MAGIC "GACKEND"
#define PREFIX "checkpoint-"
#define SUFFIX ".gack"
#define TRAILER_BYTES 24u
#define MEMBER_BYTES 26u
/* Buffers move between the store and the file this many floats at a time (16 MiB). */
#define PIECE_ELEMS ((size_t)4 << 20)

void ga_ckpt_meta_free(ga_ckpt_meta *m)
{
    if (!m) return;
    for (uint32_t i = 0; m->tensors && i < m->ntensors; i++) ga_free(m->tensors[i].name), ga_free(m->tensors[i].shape);
    ga_free(m->tensors), ga_free(m->members), ga_free(m->config), ga_free(m->job);
    ga_free(m);
}

/* ---- the meta as bytes ---- */

typedef struct bytes {
    uint8_t *p;
    size_t len, cap;
    bool failed;
} bytes;

static void put(bytes *b, const void *src, size_t n)
{
    if (b->failed) return;
    if (b->len + n > b->cap) {
        size_t ncap = b->cap ? 2 * b->cap : 4096;
        while (ncap < b->len + n) ncap *= 2;
        uint8_t *np = ga_malloc(ncap);
        if (!np) {
            b->failed = true;
            return;
        }
        if (b->len) memcpy(np, b->p, b->len);
        ga_free(b->p);
        b->p = np, b->cap = ncap;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}
#define PUT(b, v) put((b), &(v), sizeof(v))

static void meta_encode(const ga_ckpt_meta *m, bytes *b)
{
    uint64_t u64[6] = {m->version, m->unix_ms, m->steps, m->late_pushes, m->deadline_closes, m->duplicate_pushes};
    uint32_t u32[4] = {m->world, m->ntensors, (uint32_t)strlen(m->job), (uint32_t)m->config_len};
    PUT(b, u64), PUT(b, u32);
    put(b, m->job, u32[2]);
    put(b, m->config, m->config_len);
    for (uint32_t r = 0; r < m->world; r++) {
        const ga_ckpt_member *x = &m->members[r];
        uint8_t flags[2] = {x->has_pushed, x->left};
        PUT(b, x->incarnation), PUT(b, x->last_step), PUT(b, x->commit_mask), PUT(b, flags);
    }
    for (uint32_t t = 0; t < m->ntensors; t++) {
        const ga_ckpt_tensor *x = &m->tensors[t];
        uint32_t name_len = (uint32_t)strlen(x->name);
        PUT(b, name_len), PUT(b, x->ndim), PUT(b, x->elements), PUT(b, x->adam_steps), PUT(b, x->buffers);
        put(b, x->name, name_len);
        put(b, x->shape, x->ndim * sizeof *x->shape);
    }
}

static char *take_string(ga_cursor *c, size_t n)
{
    if (c->left < n) return NULL;
    char *s = ga_malloc(n + 1);
    if (!s) return NULL;
    memcpy(s, c->p, n);
    s[n] = '\0';
    c->p += n, c->left -= n;
    return s;
}

static ga_status meta_decode(const uint8_t *p, size_t len, ga_ckpt_meta **out, char *why, size_t cap)
{
    ga_cursor c = {p, len};
    ga_ckpt_meta *m = ga_calloc(1, sizeof *m);
    uint64_t u64[6];
    uint32_t u32[4];
    if (!m) return ga_status_fail(GA_E_NOMEM, why, cap, "out of memory loading a checkpoint");
    if (!ga_cursor_take(&c, u64, sizeof u64) || !ga_cursor_take(&c, u32, sizeof u32)) goto bad;
    m->version = u64[0], m->unix_ms = u64[1], m->steps = u64[2], m->late_pushes = u64[3];
    m->deadline_closes = u64[4], m->duplicate_pushes = u64[5];
    m->world = u32[0];
    if (u32[2] == 0 || u32[2] > c.left || m->world == 0 || (uint64_t)m->world * MEMBER_BYTES > c.left) goto bad;
    if (!(m->job = take_string(&c, u32[2]))) goto bad;
    m->config_len = u32[3];
    if (m->config_len > c.left || !(m->config = ga_malloc(m->config_len + 1))) goto bad;
    ga_cursor_take(&c, m->config, m->config_len);
    if (!(m->members = ga_calloc(m->world, sizeof *m->members))) goto bad;
    for (uint32_t r = 0; r < m->world; r++) {
        ga_ckpt_member *x = &m->members[r];
        uint8_t flags[2];
        if (!ga_cursor_take(&c, &x->incarnation, 8) || !ga_cursor_take(&c, &x->last_step, 8) ||
            !ga_cursor_take(&c, &x->commit_mask, 8) || !ga_cursor_take(&c, flags, 2))
            goto bad;
        x->has_pushed = flags[0], x->left = flags[1];
    }
    if ((uint64_t)u32[1] * 36 > c.left || !(m->tensors = ga_calloc(u32[1] + 1, sizeof *m->tensors))) goto bad;
    for (uint32_t t = 0; t < u32[1]; t++) {
        ga_ckpt_tensor *x = &m->tensors[t];
        uint32_t name_len;
        if (!ga_cursor_take(&c, &name_len, 4) || !ga_cursor_take(&c, &x->ndim, 4) ||
            !ga_cursor_take(&c, &x->elements, 8) || !ga_cursor_take(&c, &x->adam_steps, 8) ||
            !ga_cursor_take(&c, &x->buffers, 4))
            goto bad;
        m->ntensors = t + 1; /* from here on the tensor's strings are freed with the meta */
        if (name_len == 0 || !(x->name = take_string(&c, name_len))) goto bad;
        if (x->ndim == 0 || (uint64_t)x->ndim * 8 > c.left || !(x->shape = ga_malloc(x->ndim * 8))) goto bad;
        ga_cursor_take(&c, x->shape, x->ndim * 8);
        if (!(x->buffers & 1u << GA_STORE_BUF_PARAMS) || x->buffers >> GA_STORE_BUFS) goto bad;
    }
    if (c.left) goto bad;
    *out = m;
    return GA_OK;
bad:
    ga_ckpt_meta_free(m);
    return ga_status_fail(GA_E_PROTO, why, cap, "checkpoint meta does not parse");
}

/* ---- writing ---- */

typedef struct sink {
    ga_dfile file;
    uint32_t crc;
    uint64_t bytes;
} sink;

static ga_status emit(sink *o, const void *p, size_t n, char *why, size_t cap)
{
    GA_CHECK(ga_dfile_write(&o->file, p, n, why, cap));
    o->crc = ga_crc32c(o->crc, p, n);
    o->bytes += n;
    return GA_OK;
}

static ga_status emit_tensors(sink *o, ga_ckpt_meta *m, ga_store *s, char *why, size_t cap)
{
    size_t most = 1;
    for (uint32_t t = 0; t < m->ntensors; t++)
        if (m->tensors[t].elements > most) most = m->tensors[t].elements;
    if (most > PIECE_ELEMS) most = PIECE_ELEMS;
    float *piece = ga_malloc(most * sizeof *piece);
    if (!piece) return ga_status_fail(GA_E_NOMEM, why, cap, "out of memory writing a checkpoint");
    ga_status st = GA_OK;
    for (uint32_t t = 0; t < m->ntensors && st == GA_OK; t++) {
        size_t n = m->tensors[t].elements;
        for (int b = 0; b < GA_STORE_BUFS && st == GA_OK; b++) {
            if (!(m->tensors[t].buffers & 1u << b)) continue;
            for (size_t off = 0; off < n && st == GA_OK; off += most) {
                size_t len = n - off < most ? n - off : most;
                st = ga_store_read(s, t, (ga_store_buf)b, off, len, piece);
                if (st != GA_OK)
                    ga_status_fail(st, why, cap, "reading tensor '%.100s' from the store: %s", m->tensors[t].name,
                                   ga_strerror(st));
                else
                    st = emit(o, piece, len * sizeof *piece, why, cap);
            }
        }
    }
    ga_free(piece);
    return st;
}

static ga_status prune(const char *dir, uint32_t keep, uint64_t *oldest_kept, char *why, size_t cap)
{
    char **names;
    size_t n;
    GA_CHECK(ga_ckpt_list(dir, &names, &n, why, cap));
    ga_status st = GA_OK;
    for (size_t i = keep; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (unlink(path) != 0 && errno != ENOENT) {
            st = ga_status_fail(GA_E_IO, why, cap, "removing %s: %s", path, strerror(errno));
            break;
        }
    }
    size_t last = n < keep ? n : keep;
    if (last && sscanf(names[last - 1], PREFIX "%20" SCNu64, oldest_kept) != 1) *oldest_kept = 0;
    ga_file_names_free(names, n);
    if (st == GA_OK && n > keep) st = ga_file_sync_dir(dir, why, cap);
    return st;
}

ga_status ga_ckpt_write(const char *dir, ga_ckpt_meta *m, ga_store *s, uint32_t keep, uint64_t *oldest_kept,
                        char *why, size_t cap)
{
    if (m->ntensors > ga_store_tensors(s) || keep == 0) return ga_status_fail(GA_E_INVAL, why, cap, "bad checkpoint");
    for (uint32_t t = 0; t < m->ntensors; t++) {
        ga_ckpt_tensor *x = &m->tensors[t];
        x->adam_steps = ga_store_adam_steps(s, t);
        x->buffers = 0;
        for (int b = 0; b < GA_STORE_BUFS; b++)
            if (ga_store_has(s, t, (ga_store_buf)b)) x->buffers |= 1u << b;
    }
    GA_CHECK(ga_file_mkdirs(dir, why, cap));
    char tmp[4096], path[4096];
    snprintf(tmp, sizeof tmp, "%s/." PREFIX "%020" PRIu64 ".tmp", dir, m->version);
    snprintf(path, sizeof path, "%s/" PREFIX "%020" PRIu64 SUFFIX, dir, m->version);

    bytes meta = {0};
    meta_encode(m, &meta);
    if (meta.failed) {
        ga_free(meta.p);
        return ga_status_fail(GA_E_NOMEM, why, cap, "out of memory writing a checkpoint");
    }
    sink o = {.crc = 0};
    ga_status st = ga_dfile_create(&o.file, tmp, O_TRUNC, 0640, true, why, cap);
    if (st != GA_OK) {
        ga_free(meta.p);
        return st;
    }
    uint64_t meta_len = meta.len;
    GA_CHECK_GOTO(emit(&o, MAGIC, 8, why, cap), st, fail);
    GA_CHECK_GOTO(emit(&o, &meta_len, 8, why, cap), st, fail);
    GA_CHECK_GOTO(emit(&o, meta.p, meta.len, why, cap), st, fail);
    GA_CHECK_GOTO(emit_tensors(&o, m, s, why, cap), st, fail);
    uint8_t trailer[TRAILER_BYTES] = END_MAGIC;
    uint32_t crc = o.crc, zero = 0;
    memcpy(trailer + 8, &o.bytes, 8), memcpy(trailer + 16, &crc, 4), memcpy(trailer + 20, &zero, 4);
    GA_CHECK_GOTO(emit(&o, trailer, sizeof trailer, why, cap), st, fail);
    GA_CHECK_GOTO(ga_dfile_commit(&o.file, why, cap), st, fail);
    GA_CHECK_GOTO(ga_dfile_trim(&o.file, why, cap), st, fail); /* the trailer ends the file */
    GA_CHECK_GOTO(ga_dfile_sync(&o.file, why, cap), st, fail);
    ga_dfile_close(&o.file);
    if (rename(tmp, path) != 0) {
        st = ga_status_fail(GA_E_IO, why, cap, "renaming %s to %s: %s", tmp, path, strerror(errno));
        goto fail;
    }
    ga_free(meta.p);
    GA_CHECK(ga_file_sync_dir(dir, why, cap));
    return prune(dir, keep, oldest_kept, why, cap);
fail:
    ga_dfile_close(&o.file);
    unlink(tmp);
    ga_free(meta.p);
    return st;
}

static int newest_first(const void *a, const void *b)
{
    return -strcmp(*(char *const *)a, *(char *const *)b);
}

ga_status ga_ckpt_list(const char *dir, char ***names, size_t *n, char *why, size_t cap)
{
    GA_CHECK(ga_file_list(dir, PREFIX, SUFFIX, names, n, why, cap));
    if (*n) qsort(*names, *n, sizeof **names, newest_first);
    return GA_OK;
}

/* ---- loading ---- */

/* The whole file's checksum against its trailer; *body = the bytes before the trailer. */
static ga_status verify(int fd, const char *path, uint64_t size, uint64_t *body, char *why, size_t cap)
{
    uint8_t trailer[TRAILER_BYTES];
    if (size < 16 + TRAILER_BYTES) return ga_status_fail(GA_E_PROTO, why, cap, "%s: too short", path);
    if (pread(fd, trailer, sizeof trailer, (off_t)(size - TRAILER_BYTES)) != (ssize_t)sizeof trailer)
        return ga_status_fail(GA_E_IO, why, cap, "reading %s: %s", path, strerror(errno));
    uint64_t len;
    uint32_t want;
    memcpy(&len, trailer + 8, 8), memcpy(&want, trailer + 16, 4);
    if (memcmp(trailer, END_MAGIC, 8) != 0 || len != size - TRAILER_BYTES)
        return ga_status_fail(GA_E_PROTO, why, cap, "%s: no valid trailer (cut short?)", path);
    size_t block = (size_t)8 << 20;
    uint8_t *buf = ga_malloc(block);
    if (!buf) return ga_status_fail(GA_E_NOMEM, why, cap, "out of memory verifying %s", path);
    uint32_t crc = 0;
    ga_status st = GA_OK;
    for (uint64_t off = 0; off < len && st == GA_OK;) {
        size_t n = len - off < block ? (size_t)(len - off) : block;
        if (pread(fd, buf, n, (off_t)off) != (ssize_t)n)
            st = ga_status_fail(GA_E_IO, why, cap, "reading %s: %s", path, strerror(errno));
        crc = ga_crc32c(crc, buf, n);
        off += n;
    }
    ga_free(buf);
    if (st == GA_OK && crc != want)
        st = ga_status_fail(GA_E_PROTO, why, cap, "%s: checksum mismatch (crc32c %08x, trailer says %08x)", path, crc,
                            want);
    *body = len;
    return st;
}

static ga_status load_buffers(int fd, const char *path, const ga_ckpt_meta *m, uint64_t left,
                              const ga_ckpt_loader *l, char *why, size_t cap)
{
    ga_status st = GA_OK;
    for (uint32_t t = 0; t < m->ntensors && st == GA_OK; t++) {
        const ga_ckpt_tensor *x = &m->tensors[t];
        for (int b = 0; b < GA_STORE_BUFS && st == GA_OK; b++) {
            if (!(x->buffers & 1u << b)) continue;
            if (x->elements > left / 4) return ga_status_fail(GA_E_PROTO, why, cap, "%s: tensor data cut short", path);
            float *v = ga_malloc(x->elements * sizeof *v + 1);
            if (!v) return ga_status_fail(GA_E_NOMEM, why, cap, "out of memory loading %s", path);
            st = ga_file_read(fd, v, x->elements * sizeof *v, path, why, cap);
            if (st == GA_OK) st = l->buffer(l->arg, t, (ga_store_buf)b, v, why, cap);
            ga_free(v);
            left -= x->elements * 4;
        }
    }
    if (st == GA_OK && left != 0) st = ga_status_fail(GA_E_PROTO, why, cap, "%s: %" PRIu64 " stray bytes", path, left);
    return st;
}

ga_status ga_ckpt_load(const char *path, const ga_ckpt_loader *l, char *why, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        ga_status st = ga_status_fail(GA_E_IO, why, cap, "opening %s: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return st;
    }
    uint64_t body = 0, meta_len = 0;
    uint8_t magic[8], *meta = NULL;
    ga_ckpt_meta *m = NULL;
    ga_status st;
    GA_CHECK_GOTO(verify(fd, path, (uint64_t)sb.st_size, &body, why, cap), st, out);
    GA_CHECK_GOTO(ga_file_read(fd, magic, 8, path, why, cap), st, out);
    GA_CHECK_GOTO(ga_file_read(fd, &meta_len, 8, path, why, cap), st, out);
    if (memcmp(magic, MAGIC, 8) != 0 || meta_len > body - 16) {
        st = ga_status_fail(GA_E_PROTO, why, cap, "%s: not a gradagg checkpoint (format 01)", path);
        goto out;
    }
    if (!(meta = ga_malloc(meta_len + 1))) {
        st = ga_status_fail(GA_E_NOMEM, why, cap, "out of memory loading %s", path);
        goto out;
    }
    GA_CHECK_GOTO(ga_file_read(fd, meta, meta_len, path, why, cap), st, out);
    GA_CHECK_GOTO(meta_decode(meta, meta_len, &m, why, cap), st, out);
    const ga_ckpt_meta *view = m;
    st = l->begin(l->arg, m, why, cap); /* takes m */
    m = NULL;
    if (st == GA_OK) st = load_buffers(fd, path, view, body - 16 - meta_len, l, why, cap);
out:
    ga_free(meta);
    ga_ckpt_meta_free(m);
    close(fd);
    return st;
}
