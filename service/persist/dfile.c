/* Append-only files with direct I/O (dfile.h): the aligned stage, the rewrite of the last
 * partial block, and the fall-back to the page cache. */
#define _GNU_SOURCE /* O_DIRECT */
#include "dfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "ga_alloc.h"

_Static_assert(GA_DFILE_STAGE % GA_DFILE_ALIGN == 0, "the stage holds whole blocks");

/* Bytes after the last whole block of n. */
static size_t partial(uint64_t n) { return (size_t)(n % GA_DFILE_ALIGN); }

static ga_status io_fail(const ga_dfile *f, const char *what, char *why, size_t cap)
{
    return ga_status_fail(GA_E_IO, why, cap, "%s %s: %s", what, f->path, strerror(errno));
}

ga_status ga_dfile_create(ga_dfile *f, const char *path, int flags, unsigned mode, bool direct, char *why, size_t cap)
{
    *f = (ga_dfile){.fd = -1};
    f->path = ga_strdup(path);
    f->mem = ga_malloc(GA_DFILE_STAGE + 2 * GA_DFILE_ALIGN);
    if (!f->path || !f->mem) {
        ga_dfile_close(f);
        return ga_status_fail(GA_E_NOMEM, why, cap, "out of memory opening %s", path);
    }
    uintptr_t a = ((uintptr_t)f->mem + GA_DFILE_ALIGN - 1) & ~(uintptr_t)(GA_DFILE_ALIGN - 1);
    f->stage = (uint8_t *)a;
    f->tail = f->stage + GA_DFILE_STAGE;
    int how = O_RDWR | O_CREAT | O_CLOEXEC | flags;
    f->direct = direct;
    if (direct) {
        f->fd = open(path, how | O_DIRECT, mode);
        if (f->fd < 0 && errno == EINVAL) {
            /* The file system has no direct I/O; the refused open may have created the file. */
            f->direct = false;
            how &= ~O_EXCL;
        }
    }
    if (!f->direct) f->fd = open(path, how, mode);
    if (f->fd < 0) {
        ga_status st = io_fail(f, "creating", why, cap);
        ga_dfile_close(f);
        return st;
    }
    return GA_OK;
}

/* pwrite of every byte. A direct write refused as unaligned (EINVAL: a file system whose blocks
 * are larger than GA_DFILE_ALIGN, or one that takes O_DIRECT at open only) goes on buffered. */
static ga_status write_at(ga_dfile *f, const uint8_t *p, size_t n, uint64_t off, char *why, size_t cap)
{
    while (n > 0) {
        ssize_t w = pwrite(f->fd, p, n, (off_t)off);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EINVAL && f->direct && fcntl(f->fd, F_SETFL, fcntl(f->fd, F_GETFL) & ~O_DIRECT) == 0) {
                f->direct = false;
                continue;
            }
            return io_fail(f, "writing", why, cap);
        }
        p += w, n -= (size_t)w, off += (uint64_t)w;
    }
    return GA_OK;
}

ga_status ga_dfile_write(ga_dfile *f, const void *p, size_t n, char *why, size_t cap)
{
    const uint8_t *src = p;
    while (n > 0) {
        if (f->fill == GA_DFILE_STAGE) {
            GA_CHECK(write_at(f, f->stage, GA_DFILE_STAGE, f->at, why, cap));
            f->at += GA_DFILE_STAGE, f->fill = 0;
        }
        size_t take = GA_DFILE_STAGE - f->fill < n ? GA_DFILE_STAGE - f->fill : n;
        memcpy(f->stage + f->fill, src, take);
        f->fill += take, src += take, n -= take;
    }
    return GA_OK;
}

ga_status ga_dfile_commit(ga_dfile *f, char *why, size_t cap)
{
    size_t padded = (f->fill + GA_DFILE_ALIGN - 1) / GA_DFILE_ALIGN * GA_DFILE_ALIGN;
    memset(f->stage + f->fill, 0, padded - f->fill);
    GA_CHECK(write_at(f, f->stage, padded, f->at, why, cap));
    size_t keep = partial(f->fill), whole = f->fill - keep;
    memmove(f->stage, f->stage + whole, keep);
    memcpy(f->tail, f->stage, keep);
    f->size = f->at + f->fill;
    f->at += whole, f->fill = keep;
    return GA_OK;
}

bool ga_dfile_cut(ga_dfile *f, uint64_t size)
{
    bool ok = size <= f->size && ftruncate(f->fd, (off_t)size) == 0;
    size_t keep = partial(size);
    f->at = size - keep, f->fill = keep;
    if (ok && size == f->size) {
        memcpy(f->stage, f->tail, keep);
    } else if (ok && keep) {
        /* An earlier end: its last partial block comes back from the file (a whole aligned
         * block is asked for; the end of the file stops the read after keep bytes). */
        ssize_t r;
        while ((r = pread(f->fd, f->stage, GA_DFILE_ALIGN, (off_t)f->at)) < 0 && errno == EINTR) {
        }
        ok = r == (ssize_t)keep;
        memcpy(f->tail, f->stage, keep);
    }
    f->size = size;
    return ok;
}

ga_status ga_dfile_trim(ga_dfile *f, char *why, size_t cap)
{
    return ftruncate(f->fd, (off_t)f->size) == 0 ? GA_OK : io_fail(f, "trimming", why, cap);
}

ga_status ga_dfile_sync(ga_dfile *f, char *why, size_t cap)
{
    if (fdatasync(f->fd) != 0) return io_fail(f, "syncing", why, cap);
    if (!f->direct) (void)posix_fadvise(f->fd, 0, 0, POSIX_FADV_DONTNEED); /* advice; dirty pages stay */
    return GA_OK;
}

void ga_dfile_close(ga_dfile *f)
{
    if (f->fd >= 0) {
        int ignored = ftruncate(f->fd, (off_t)f->size); /* failing, the padding stays: readers skip it */
        (void)ignored;
        close(f->fd);
    }
    ga_free(f->mem);
    ga_free(f->path);
    *f = (ga_dfile){.fd = -1};
}
