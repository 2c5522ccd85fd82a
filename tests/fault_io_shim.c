/* Disk faults for the journal tests (test_journal_faults.c), preloaded into a real
 * gradagg-server (LD_PRELOAD): while $GA_FAULT_IO_DIR/fail-write exists, writev to a journal
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
#include <sys/uio.h>
#include <unistd.h>

static ssize_t (*real_writev)(int, const struct iovec *, int);
static int (*real_fdatasync)(int);
static int (*real_fsync)(int);
static const char *trigger_dir;

/* At load, before the server starts a thread. */
__attribute__((constructor)) static void shim_init(void)
{
    real_writev = (ssize_t(*)(int, const struct iovec *, int))dlsym(RTLD_NEXT, "writev");
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

ssize_t writev(int fd, const struct iovec *iov, int n)
{
    if (armed("fail-write", fd)) {
        errno = ENOSPC;
        return -1;
    }
    return real_writev(fd, iov, n);
}

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
