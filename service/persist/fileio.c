/* Durable file primitives (fileio.h). */
#include "fileio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ga_alloc.h"

static ga_status io_error(char *why, size_t cap, const char *what, const char *path)
{
    return ga_status_fail(GA_E_IO, why, cap, "%s %s: %s", what, path, strerror(errno));
}

ga_status ga_file_read(int fd, void *buf, size_t len, const char *path, char *why, size_t cap)
{
    char *p = buf;
    while (len > 0) {
        ssize_t r = read(fd, p, len);
        if (r < 0) {
            if (errno == EINTR) continue;
            return io_error(why, cap, "reading", path);
        }
        if (r == 0) return ga_status_fail(GA_E_LENGTH, why, cap, "%s ends early", path);
        p += r, len -= (size_t)r;
    }
    return GA_OK;
}

ga_status ga_file_sync_dir(const char *dir, char *why, size_t cap)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return io_error(why, cap, "opening directory", dir);
    ga_status st = fsync(fd) == 0 ? GA_OK : io_error(why, cap, "syncing directory", dir);
    close(fd);
    return st;
}

ga_status ga_file_mkdirs(const char *dir, char *why, size_t cap)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return ga_status_fail(GA_E_IO, why, cap, "path too long: %.80s...", dir);
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char saved = *p;
        *p = '\0';
        if (mkdir(path, 0750) != 0 && errno != EEXIST) return io_error(why, cap, "creating directory", path);
        *p = saved;
        if (saved == '\0') break;
    }
    return GA_OK;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

ga_status ga_file_list(const char *dir, const char *prefix, const char *suffix, char ***names, size_t *n, char *why,
                       size_t cap)
{
    DIR *d = opendir(dir);
    if (!d) {
        if (errno != ENOENT) return io_error(why, cap, "listing", dir);
        *names = NULL, *n = 0;
        return GA_OK;
    }
    char **v = NULL;
    size_t count = 0, vcap = 0, lp = strlen(prefix), ls = strlen(suffix);
    ga_status st = GA_OK;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < lp + ls || strncmp(e->d_name, prefix, lp) != 0 || strcmp(e->d_name + len - ls, suffix) != 0)
            continue;
        if (count == vcap) {
            size_t ncap = vcap ? 2 * vcap : 16;
            char **nv = ga_malloc(ncap * sizeof *nv);
            if (!nv) goto nomem;
            if (count) memcpy(nv, v, count * sizeof *v);
            ga_free(v);
            v = nv, vcap = ncap;
        }
        if (!(v[count] = ga_strdup(e->d_name))) goto nomem;
        count++;
    }
    closedir(d);
    if (count) qsort(v, count, sizeof *v, by_name);
    *names = v, *n = count;
    return st;
nomem:
    closedir(d);
    ga_file_names_free(v, count);
    return ga_status_fail(GA_E_NOMEM, why, cap, "out of memory listing %s", dir);
}

void ga_file_names_free(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++) ga_free(names[i]);
    ga_free(names);
}

ga_status ga_file_remove_dir(const char *dir, char *why, size_t cap)
{
    char **names;
    size_t n;
    GA_CHECK(ga_file_list(dir, "", "", &names, &n, why, cap));
    ga_status st = GA_OK;
    for (size_t i = 0; i < n && st == GA_OK; i++) {
        if (!strcmp(names[i], ".") || !strcmp(names[i], "..")) continue;
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (unlink(path) != 0 && errno != ENOENT) st = io_error(why, cap, "removing", path);
    }
    ga_file_names_free(names, n);
    if (st == GA_OK && rmdir(dir) != 0 && errno != ENOENT) st = io_error(why, cap, "removing", dir);
    if (st != GA_OK) return st;
    char parent[4200];
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    if (!slash) return GA_OK;
    *slash = '\0';
    return ga_file_sync_dir(parent[0] ? parent : "/", why, cap);
}
