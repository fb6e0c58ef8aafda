/* conntrack.h - a deadline for receiving each request, against clients that
 * trickle bytes (one a second never trips libmicrohttpd's idle timeout). */
#ifndef ILPD_CONNTRACK_H
#define ILPD_CONNTRACK_H

#include <microhttpd.h>

/* Starts the reaper thread: a connection that has not delivered a whole
 * request (headers and body) within TIMEOUT_S seconds of its start, or of
 * the end of its previous request, is shut down. Returns 0 or -1. */
int conntrack_start(int timeout_s);
/* Stops and joins the reaper; tracked entries are freed as MHD closes them. */
void conntrack_stop(void);

/* For MHD_OPTION_NOTIFY_CONNECTION. */
void conntrack_notify(void *cls, struct MHD_Connection *c, void **socket_context, enum MHD_ConnectionNotificationCode code);
/* The request on C has arrived whole (1) or a new one may start (0). */
void conntrack_set_received(struct MHD_Connection *c, int received);

#endif
