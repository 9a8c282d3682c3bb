/*
 * mime.h - media types of served files, from the file name's extension
 * (a built-in table, the common subset of nginx's mime.types and IANA's
 * registry). Content is never sniffed: the type of a resource must not
 * change with its bytes, and a lookup must cost nothing at a million files.
 */
#ifndef SOURCE_MIME_H
#define SOURCE_MIME_H

/* The type for the path's extension (case-insensitive), or
 * "application/octet-stream". A static string. */
const char *mime_type_of(const char *path);

#endif
