/* error.c - messages for the RS_E* codes (rs_error.h). */
#include "rs_error.h"

const char *
rs_strerror(int rc)
{
    switch (rc) {
    case RS_OK: return "success";
    case RS_ENOMEM: return "out of memory";
    case RS_EINVAL: return "invalid argument or value";
    case RS_EPARSE: return "not well-formed XML";
    case RS_EINVALID: return "not a valid ResourceSync document";
    case RS_ETOOBIG: return "limit exceeded";
    case RS_EAGAIN: return "would block";
    case RS_EIO: return "I/O error";
    case RS_ENOTFOUND: return "not found";
    case RS_ECANCELED: return "cancelled";
    case RS_EPROTO: return "protocol error";
    case RS_ETIMEDOUT: return "timed out";
    case RS_EUNSUPPORTED: return "not supported";
    case RS_ESTOPPED: return "stopped by callback";
    case RS_ESTATE: return "invalid in current state";
    case RS_EDENIED: return "refused by policy";
    }
    return "unknown error";
}
