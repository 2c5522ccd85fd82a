/* Disk faults for the journal tests (test_journal_faults.c), preloaded into a real
 * gradagg-server (LD_PRELOAD): while $GA_FAULT_IO_DIR/fail-write exists, pwrite to a journal
 * segment (a path with "/journal-") fails with ENOSPC; while $GA_FAULT_IO_DIR/fail-sync exists,
 * fdatasync and fsync of one fail with EIO. Everything else passes through. Built without
 * sanitizers: under them the server's own interceptors call through to these. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static int (*real_fdatasync)(int);
static int (*real_fsync)(int);
static const char *trigger_dir;

/* At load, before the server starts a thread. */
__attribute__((constructor)) static void shim_init(void)
{
    real_pwrite = (ssize_t(*)(int, const void *, size_t, off_t))dlsym(RTLD_NEXT, "pwrite");
    real_fdatasync = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    real_fsync = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    trigger_dir = getenv("GA_FAULT_IO_DIR");
}

static bool armed(const char *trigger, int fd)
{
    if (!trigger_dir) return false;
    char path[512], link[64], target[512];
    snprintf(path, sizeof path, "%s/%s", trigger_dir, trigger);
    if (access(path, F_OK) != 0) return false;
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0) return false;
    target[n] = '\0';
    return strstr(target, "/journal-") != NULL;
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t at)
{
    if (armed("fail-write", fd)) {
        errno = ENOSPC;
        return -1;
    }
    return real_pwrite(fd, buf, n, at);
}

/* The same symbol under its large-file name (a build with _FILE_OFFSET_BITS=64 calls this). */
ssize_t pwrite64(int fd, const void *buf, size_t n, off_t at) { return pwrite(fd, buf, n, at); }

int fdatasync(int fd)
{
    if (armed("fail-sync", fd)) {
        errno = EIO;
        return -1;
    }
    return real_fdatasync(fd);
}

int fsync(int fd)
{
    if (armed("fail-sync", fd)) {
        errno = EIO;
        return -1;
    }
    return real_fsync(fd);
}
