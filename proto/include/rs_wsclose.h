/*
 * rs_wsclose.h - the WebSocket close codes of rshub's channels
 * (docs/protocol.md section 4), named once for both ends: the hub that
 * sends them and the subscriber that acts on them. RFC 6455's own codes
 * are listed where the channels give them a meaning.
 */
#ifndef RS_WSCLOSE_H
#define RS_WSCLOSE_H

enum rs_wsclose {
    RS_WSCLOSE_GOING_AWAY = 1001,      /* hub shutting down: reconnect
                                          (another node), since=LAST */
    RS_WSCLOSE_PROTOCOL = 1002,        /* RFC 6455 protocol error */
    RS_WSCLOSE_BAD_DATA = 1007,        /* RFC 6455: a text frame that is not
                                          UTF-8 */
    RS_WSCLOSE_TRY_LATER = 1013,       /* the hub holds as many channels as
                                          it may: later, or another node */
    RS_WSCLOSE_GAP = 4001,             /* since is older than the backlog:
                                          pull, then resume */
    RS_WSCLOSE_SLOW = 4002,            /* slow consumer cut: since=LAST */
    RS_WSCLOSE_BACKLOG_DOWN = 4003,    /* the backlog (Redis) is unavailable
                                          for a replay: later, since=LAST */
    RS_WSCLOSE_UNKNOWN_CHANNEL = 4004, /* no such channel (yet) */
    RS_WSCLOSE_BAD_SINCE = 4005,       /* a since value the hub refuses */
    RS_WSCLOSE_REVOKED = 4008,         /* the read credential expired, or a
                                          reload no longer lets it in: get a
                                          new one, then since=LAST */
};

#endif
