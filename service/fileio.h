/* Durable file primitives for checkpoints and the journal: whole writes, fsync of a directory,
 * atomic replacement (temp file, fsync, rename, fsync of the directory) and sorted listings.
 * Blocking I/O: call from a thread-pool task, or from the loop only for small writes. Errors
 * are GA_E_IO with a message naming the path and errno's text. Any thread. */
#ifndef GA_FILEIO_H
#define GA_FILEIO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "ga_status.h"

/* Writes every byte of iov[0..n) to fd (retrying short writes and EINTR). iov is consumed. */
ga_status ga_file_writev(int fd, struct iovec *iov, int n, const char *path, char *why, size_t cap);
/* Reads exactly len bytes at the current position; GA_E_LENGTH at a short read (end of file). */
ga_status ga_file_read(int fd, void *buf, size_t len, const char *path, char *why, size_t cap);
/* Drops fd's pages that are on the disk from the page cache (advice: no error). For files read
 * again only at start-up (checkpoints, the journal), after their fsync: kept, they would make
 * the next writes take fresh pages, which costs the writer far more than the copy (10x on a VM
 * whose host backs guest memory lazily), and a container's page cache counts against its
 * memory limit. Dirty pages stay. */
void ga_file_uncache(int fd);
/* fsync of the directory itself, so a rename or unlink in it is durable. */
ga_status ga_file_sync_dir(const char *dir, char *why, size_t cap);
/* mkdir -p with mode 0750. */
ga_status ga_file_mkdirs(const char *dir, char *why, size_t cap);

/* The names in dir that start with prefix and end with suffix, sorted ascending (names carry
 * fixed-width numbers, so this is numeric order). *names is owned: ga_file_names_free. A
 * missing directory is an empty list. */
ga_status ga_file_list(const char *dir, const char *prefix, const char *suffix, char ***names, size_t *n, char *why,
                       size_t cap);
void ga_file_names_free(char **names, size_t n);

#endif
