/* File primitives for checkpoints and the journal: whole reads, fsync of a directory, mkdir -p
 * and sorted listings (their writes: dfile.h). Blocking I/O: call from a thread-pool task, or
 * from the loop only for small files. Errors are GA_E_IO with a message naming the path and
 * errno's text. Any thread. */
#ifndef GA_FILEIO_H
#define GA_FILEIO_H

#include <stddef.h>
#include <stdint.h>

#include "ga_status.h"

/* Reads exactly len bytes at the current position; GA_E_LENGTH at a short read (end of file). */
ga_status ga_file_read(int fd, void *buf, size_t len, const char *path, char *why, size_t cap);
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
/* Removes dir and the files in it (a job's directory holds no subdirectory), then fsyncs its
 * parent. A missing directory is not an error. */
ga_status ga_file_remove_dir(const char *dir, char *why, size_t cap);

#endif
