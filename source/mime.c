/*
 * mime.c - extension -> media type table for served files. Sorted by
 * extension so a lookup is a binary search. Add types here; nothing else
 * decides types.
 */
#include "mime.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct mime_ext {
    const char *ext;       /* lower case, without the dot */
    const char *type;
};

/* Sorted by ext (strcmp order); mime_type_of relies on it. */
static const struct mime_ext mime_table[] = {
    { "7z", "application/x-7z-compressed" },
    { "aac", "audio/aac" },
    { "atom", "application/atom+xml" },
    { "avi", "video/x-msvideo" },
    { "avif", "image/avif" },
    { "bin", "application/octet-stream" },
    { "bmp", "image/bmp" },
    { "bz2", "application/x-bzip2" },
    { "c", "text/x-c" },
    { "css", "text/css" },
    { "csv", "text/csv" },
    { "doc", "application/msword" },
    { "docx", "application/vnd.openxmlformats-officedocument."
              "wordprocessingml.document" },
    { "epub", "application/epub+zip" },
    { "flac", "audio/flac" },
    { "geojson", "application/geo+json" },
    { "gif", "image/gif" },
    { "gz", "application/gzip" },
    { "h", "text/x-c" },
    { "htm", "text/html" },
    { "html", "text/html" },
    { "ico", "image/vnd.microsoft.icon" },
    { "ics", "text/calendar" },
    { "jpeg", "image/jpeg" },
    { "jpg", "image/jpeg" },
    { "js", "text/javascript" },
    { "json", "application/json" },
    { "jsonld", "application/ld+json" },
    { "m4a", "audio/mp4" },
    { "md", "text/markdown" },
    { "mjs", "text/javascript" },
    { "mkv", "video/x-matroska" },
    { "mov", "video/quicktime" },
    { "mp3", "audio/mpeg" },
    { "mp4", "video/mp4" },
    { "mpeg", "video/mpeg" },
    { "n3", "text/n3" },
    { "nq", "application/n-quads" },
    { "nt", "application/n-triples" },
    { "odp", "application/vnd.oasis.opendocument.presentation" },
    { "ods", "application/vnd.oasis.opendocument.spreadsheet" },
    { "odt", "application/vnd.oasis.opendocument.text" },
    { "oga", "audio/ogg" },
    { "ogg", "audio/ogg" },
    { "ogv", "video/ogg" },
    { "otf", "font/otf" },
    { "pdf", "application/pdf" },
    { "png", "image/png" },
    { "ppt", "application/vnd.ms-powerpoint" },
    { "pptx", "application/vnd.openxmlformats-officedocument."
              "presentationml.presentation" },
    { "py", "text/x-python" },
    { "rdf", "application/rdf+xml" },
    { "rss", "application/rss+xml" },
    { "rtf", "application/rtf" },
    { "sh", "application/x-sh" },
    { "svg", "image/svg+xml" },
    { "tar", "application/x-tar" },
    { "tif", "image/tiff" },
    { "tiff", "image/tiff" },
    { "trig", "application/trig" },
    { "tsv", "text/tab-separated-values" },
    { "ttf", "font/ttf" },
    { "ttl", "text/turtle" },
    { "txt", "text/plain" },
    { "wasm", "application/wasm" },
    { "wav", "audio/wav" },
    { "weba", "audio/webm" },
    { "webm", "video/webm" },
    { "webp", "image/webp" },
    { "woff", "font/woff" },
    { "woff2", "font/woff2" },
    { "xhtml", "application/xhtml+xml" },
    { "xls", "application/vnd.ms-excel" },
    { "xlsx", "application/vnd.openxmlformats-officedocument."
              "spreadsheetml.sheet" },
    { "xml", "application/xml" },
    { "xsd", "application/xml" },
    { "xsl", "application/xslt+xml" },
    { "yaml", "application/yaml" },
    { "yml", "application/yaml" },
    { "zip", "application/zip" },
    { "zst", "application/zstd" },
};

static int
mime_cmp(const void *key, const void *elem)
{
    return strcmp(key, ((const struct mime_ext *)elem)->ext);
}

const char *
mime_type_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *name = slash != NULL ? slash + 1 : path;
    const char *dot = strrchr(name, '.');
    char ext[16];
    size_t n;
    if (dot == NULL || dot == name || (n = strlen(dot + 1)) == 0 ||
        n >= sizeof(ext))
        return "application/octet-stream";
    for (size_t i = 0; i <= n; i++) {
        char c = dot[1 + i];
        ext[i] = c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
    }
    const struct mime_ext *m =
        bsearch(ext, mime_table, sizeof(mime_table) / sizeof(mime_table[0]),
                sizeof(mime_table[0]), mime_cmp);
    return m != NULL ? m->type : "application/octet-stream";
}
