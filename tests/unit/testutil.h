/*
 * testutil.h - fixtures shared by the unit tests: reading test data files,
 * temp directories, and an allocator that fails the Nth allocation.
 */
#ifndef RS_TESTUTIL_H
#define RS_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

/* Read tests/data/<rel> into a new NUL-terminated buffer (free with free());
 * fails the test when missing. */
char *tu_read_data(const char *rel, size_t *len);

/* Read any file; NULL if it cannot be read. */
char *tu_read_file(const char *path, size_t *len);

/* A small file's text (its first 4095 bytes) in a static buffer, until the
 * next call; NULL if it cannot be read. */
const char *tu_read_str(const char *path);

/* Entries of dir (not . and ..); with prefix, only those starting so; -1
 * when dir cannot be read. */
int tu_count_entries(const char *dir, const char *prefix);

/* Absolute path of tests/data/<rel> in a static buffer. */
const char *tu_data_path(const char *rel);

/* Make a fresh temporary directory (mkdtemp); caller removes it with
 * tu_rmtree. Returned string is malloc'ed. */
char *tu_mkdtemp(void);
void tu_rmtree(const char *path);

/* Write path (created or truncated, mode 644): n bytes, the i-th being
 * (first + i % 251) & 0xff, so files of other first bytes or sizes differ
 * and a digest over the bytes can be computed again with tu_pattern_byte.
 * Fails the test when it cannot. */
void tu_write_pattern(const char *path, size_t n, int first);
static inline unsigned char
tu_pattern_byte(int first, size_t i)
{
    return (unsigned char)(first + (int)(i % 251));
}

/* Failing allocator: after tu_alloc_fail_at(n) the n-th rs_malloc/rs_realloc
 * from now (1-based) returns NULL, and all before it succeed.
 * tu_alloc_fail_at(0) restores normal allocation. tu_alloc_count() is the
 * number of allocations seen since the last call to tu_alloc_fail_at();
 * tu_alloc_fail_at(ULONG_MAX) counts without failing. */
void tu_alloc_fail_at(unsigned long n);
unsigned long tu_alloc_count(void);

/* A TCP socket bound to 127.0.0.1 on a port the kernel picks (*port).
 * backlog > 0: listening, never accepted (a connect completes, nothing is
 * ever answered); 0: bound only (a connect is refused, or the port is
 * free once closed). The caller closes it. Fails the test on error. */
int tu_loopback_socket(int backlog, int *port);

/* Of this process's threads other than the main one (*others counts
 * them), how many leave sig unblocked (/proc/self/task/N/status, SigBlk).
 * A thread blocks signals first thing (rs_thread_signals_to_loop), so one
 * just started gets up to a second to do so. Ask once the threads did
 * some work: while ASan starts a thread it shows every signal blocked. */
int tu_threads_unblocked(int sig, int *others);

#endif
