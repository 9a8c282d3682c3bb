/*
 * rs_error.h - the project's error codes and their messages.
 * Every fallible function in proto/ and common/ returns 0 or a negative
 * RS_E* code; rs_strerror() turns one into a short English phrase.
 */
#ifndef RS_ERROR_H
#define RS_ERROR_H

#define RS_MUST_CHECK __attribute__((warn_unused_result))

enum rs_err {
    RS_OK = 0,
    RS_ENOMEM = -1,      /* an allocation failed */
    RS_EINVAL = -2,      /* bad argument or malformed value */
    RS_EPARSE = -3,      /* input is not well-formed XML */
    RS_EINVALID = -4,    /* well-formed, but breaks a ResourceSync rule */
    RS_ETOOBIG = -5,     /* a configured limit was reached */
    RS_EAGAIN = -6,      /* would block; try again later */
    RS_EIO = -7,         /* an OS-level read/write failed */
    RS_ENOTFOUND = -8,   /* the named thing does not exist */
    RS_ECANCELED = -9,   /* the operation was cancelled (shutdown) */
    RS_EPROTO = -10,     /* a peer broke its protocol */
    RS_ETIMEDOUT = -11,  /* a deadline passed */
    RS_EUNSUPPORTED = -12, /* valid, but not something we implement */
    RS_ESTOPPED = -13,   /* a callback asked to stop */
    RS_ESTATE = -14,     /* call not valid in the object's current state */
    RS_EDENIED = -15,    /* refused by a policy (e.g. a denied network) */
};

/* A static string for rc; never NULL, also for unknown codes. */
const char *rs_strerror(int rc);

#endif
