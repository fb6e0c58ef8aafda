/* conntrack.c - per-connection request deadlines. Each connection gets an
 * entry (MHD's socket context) on a list; a reaper thread wakes twice a
 * second and shuts down the sockets whose request is overdue, which makes
 * libmicrohttpd close them on its next turn. */
#include "server/conntrack.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include "engine/log.h"

typedef struct track {
    struct track *prev, *next;
    int fd, received, reaped;
    double t0;
} track;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static track *head;
static pthread_t reaper;
static int running, timeout;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *reaper_main(void *arg) {
    (void)arg;
    pthread_mutex_lock(&lock);
    while (running) {
        double now = now_s();
        for (track *t = head; t; t = t->next)
            if (!t->received && !t->reaped && now - t->t0 > timeout) {
                t->reaped = 1;
                shutdown(t->fd, SHUT_RDWR);
                log_msg(LOG_WARN, "request_timeout", "closed a connection that sent no whole request in %d s", timeout);
            }
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 500000000L;
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&wake, &lock, &until);
    }
    pthread_mutex_unlock(&lock);
    return NULL;
}

int conntrack_start(int timeout_s) {
    timeout = timeout_s;
    running = 1;
    if (pthread_create(&reaper, NULL, reaper_main, NULL)) {
        running = 0;
        return -1;
    }
    return 0;
}

void conntrack_stop(void) {
    pthread_mutex_lock(&lock);
    int was = running;
    running = 0;
    pthread_cond_signal(&wake);
    pthread_mutex_unlock(&lock);
    if (was) pthread_join(reaper, NULL);
}

void conntrack_notify(void *cls, struct MHD_Connection *c, void **socket_context, enum MHD_ConnectionNotificationCode code) {
    (void)cls;
    pthread_mutex_lock(&lock);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        track *t = ci ? calloc(1, sizeof *t) : NULL;
        if (t) { /* without an entry the connection only has the idle timeout */
            t->fd = ci->connect_fd;
            t->t0 = now_s();
            t->next = head;
            if (head) head->prev = t;
            head = t;
        }
        *socket_context = t;
    } else if (*socket_context) {
        track *t = *socket_context;
        if (t->prev) t->prev->next = t->next;
        else head = t->next;
        if (t->next) t->next->prev = t->prev;
        free(t);
        *socket_context = NULL;
    }
    pthread_mutex_unlock(&lock);
}

void conntrack_set_received(struct MHD_Connection *c, int received) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    if (!ci || !ci->socket_context) return;
    pthread_mutex_lock(&lock);
    track *t = ci->socket_context;
    t->received = received;
    if (!received) t->t0 = now_s();
    pthread_mutex_unlock(&lock);
}
