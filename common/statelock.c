/*
 * statelock.c - the writer's lock beside a state database (rs_statelock.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "rs_statelock.h"

int
rs_statelock_take(const char *path, const char *who, int *fd, char *err,
                  size_t errlen)
{
    char lp[4200];

    *fd = -1;
    if ((size_t)snprintf(lp, sizeof(lp), "%s.lock", path) >= sizeof(lp)) {
        snprintf(err, errlen, "%.200s...: path too long", path);
        return RS_EIO;
    }
    int f = open(lp, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (f < 0) {
        snprintf(err, errlen, "%s: %s", lp, strerror(errno));
        return RS_EIO;
    }
    if (flock(f, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        close(f);
        if (e == EWOULDBLOCK) {
            snprintf(err, errlen, "%s: in use by another %s", path, who);
            return RS_ESTATE;
        }
        snprintf(err, errlen, "%s: flock: %s", lp, strerror(e));
        return RS_EIO;
    }
    *fd = f;
    return 0;
}
