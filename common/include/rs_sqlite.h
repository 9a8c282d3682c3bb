/*
 * rs_sqlite.h - an rs_time_t in and out of an SQLite column, RS_TIME_NONE
 * as NULL: the one convention of rssource's state and rssub's ledger.
 * Header-only, for the modules that link SQLite.
 */
#ifndef RS_SQLITE_H
#define RS_SQLITE_H

#include <sqlite3.h>

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

#endif
