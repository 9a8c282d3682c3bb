/*
 * rs_sqlite.h - an rs_time_t in and out of an SQLite column, RS_TIME_NONE
 * as NULL: the one convention of rssource's state and rssub's ledger; and
 * the words of an SQLite error as the daemons report it.
 * Header-only, for the modules that link SQLite.
 */
#ifndef RS_SQLITE_H
#define RS_SQLITE_H

#include <errno.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "rs_time.h"

static inline void
rs_sql_bind_time(sqlite3_stmt *s, int i, rs_time_t t)
{
    if (t != RS_TIME_NONE)
        sqlite3_bind_int64(s, i, t);
    else
        sqlite3_bind_null(s, i);
}

static inline rs_time_t
rs_sql_col_time(sqlite3_stmt *s, int i)
{
    return sqlite3_column_type(s, i) == SQLITE_NULL
               ? RS_TIME_NONE : sqlite3_column_int64(s, i);
}

/* SQLite's message for db's last error, into buf (NULL db: an open that
 * could not even allocate). An I/O error or a file that cannot be opened
 * gets the OS's words after it: "disk I/O error" alone does not tell a
 * file that may not grow (EFBIG, a quota) from a failing disk (EIO).
 * SQLite keeps the failing call's errno for some statements only (not for
 * a COMMIT), so os_errno is errno as read right after the failing call, 0
 * if not known; it is trusted only for an I/O error and when it is one of
 * the storage errors, which none of SQLite's expected failures (a lock
 * held, a journal absent) leave behind. */
static inline const char *
rs_sql_errmsg(sqlite3 *db, int os_errno, char *buf, size_t size)
{
    if (db == NULL) {
        snprintf(buf, size, "%s", sqlite3_errstr(SQLITE_NOMEM));
        return buf;
    }
    int ext = sqlite3_extended_errcode(db);
    int code = ext & 0xff;
    bool io = code == SQLITE_IOERR && ext != SQLITE_IOERR_SHORT_READ &&
              ext != SQLITE_IOERR_NOMEM;
    int sys = sqlite3_system_errno(db);
    if (sys == 0 && io &&
        (os_errno == EFBIG || os_errno == ENOSPC || os_errno == EDQUOT ||
         os_errno == EIO || os_errno == EROFS))
        sys = os_errno;
    if (sys != 0 && (io || code == SQLITE_CANTOPEN || code == SQLITE_FULL))
        snprintf(buf, size, "%s (%s)", sqlite3_errmsg(db), strerror(sys));
    else
        snprintf(buf, size, "%s", sqlite3_errmsg(db));
    return buf;
}

#endif
