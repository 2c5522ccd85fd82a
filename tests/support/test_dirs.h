/* Data directories for in-process servers: every start gets a fresh one under the test's base
 * directory, so no server restores the jobs of an earlier one (persistence is always on). */
#ifndef GA_TEST_DIRS_H
#define GA_TEST_DIRS_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

/* base/<n> for the next n, created; written to buf[0..cap). */
static inline void ga_test_fresh_dir(char *buf, size_t cap, const char *base)
{
    static int n;
    snprintf(buf, cap, "%s/%d", base, ++n);
    mkdir(buf, 0750);
}

/* rm -rf of a directory the test made under /tmp. */
static inline void ga_test_remove_dir(const char *path)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", path);
}

#endif
