/* limit.c's exchange on io_uring instead of epoll, to measure what io_uring
 * would give tcpmuxd's accept-answer-close path on this kernel (issue
 * "Performance III"): one multishot accept, then per connection a recv to
 * '\n', and one linked chain of send ("+\r\n" and a daytime line),
 * shutdown(SHUT_WR) and a recv until EOF, then close; all submitted in
 * batches by io_uring_submit_and_wait, no readiness step; completions run
 * only when the loop asks for them (IORING_SETUP_DEFER_TASKRUN, Linux 6.1).
 * TCP_NODELAY per
 * connection as in limit.c. Single-threaded, no lookup, no log, no timer.
 * Built and run by bench/limit.sh (needs liburing-dev): uring PORT. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "listen.h"

enum op { ACCEPT, READ, WRITE, SHUT, DRAIN, CLOSE };

struct conn {
    int fd;
    char buf[512];
    char reply[128];
};

static struct io_uring ring;

/* A free submission slot, submitting what is queued when there is none. */
static struct io_uring_sqe *sqe(void) {
    struct io_uring_sqe *s;
    while (!(s = io_uring_get_sqe(&ring)))
        io_uring_submit(&ring);
    return s;
}

static void tag(struct io_uring_sqe *s, struct conn *c, enum op op) {
    io_uring_sqe_set_data64(s, (uint64_t)(uintptr_t)c | op);
}

static void arm_accept(int listener) {
    struct io_uring_sqe *s = sqe();
    io_uring_prep_multishot_accept(s, listener, NULL, NULL, 0);
    tag(s, NULL, ACCEPT);
}

static void recv_into(struct conn *c, enum op op) {
    struct io_uring_sqe *s = sqe();
    io_uring_prep_recv(s, c->fd, c->buf, sizeof c->buf, 0);
    tag(s, c, op);
}

static void close_conn(struct conn *c) {
    struct io_uring_sqe *s = sqe();
    io_uring_prep_close(s, c->fd);
    tag(s, c, CLOSE);
}

/* The answer, the FIN and the wait for the client's FIN, linked: a failed
 * send cancels the rest, and the cancelled drain closes. */
static void answer(struct conn *c) {
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    size_t len = strftime(c->reply, sizeof c->reply, "+\r\n%A, %B %d, %Y %H:%M:%S-UTC\r\n", &tm);
    struct io_uring_sqe *s = sqe();
    io_uring_prep_send(s, c->fd, c->reply, len, MSG_NOSIGNAL);
    s->flags |= IOSQE_IO_LINK;
    tag(s, c, WRITE);
    s = sqe();
    io_uring_prep_shutdown(s, c->fd, SHUT_WR);
    s->flags |= IOSQE_IO_LINK;
    tag(s, c, SHUT);
    recv_into(c, DRAIN);
}

static void completed(struct io_uring_cqe *cqe, int listener) {
    uint64_t data = io_uring_cqe_get_data64(cqe);
    struct conn *c = (struct conn *)(uintptr_t)(data & ~(uint64_t)7);
    int res = cqe->res;
    int one = 1;
    switch ((enum op)(data & 7)) {
    case ACCEPT:
        if (!(cqe->flags & IORING_CQE_F_MORE))
            arm_accept(listener);
        if (res < 0)
            return;
        setsockopt(res, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        c = calloc(1, sizeof *c);
        c->fd = res;
        recv_into(c, READ);
        return;
    case READ:
        if (res <= 0)
            close_conn(c);
        else if (memchr(c->buf, '\n', res))
            answer(c);
        else
            recv_into(c, READ);
        return;
    case WRITE:
    case SHUT:
        return;
    case DRAIN:
        if (res > 0)
            recv_into(c, DRAIN);
        else
            close_conn(c);
        return;
    case CLOSE:
        free(c);
        return;
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: uring PORT\n");
        return 2;
    }
    int listener = listen_loopback(argv[1], 0);
    /* Completions are processed only when this thread asks (DEFER_TASKRUN):
     * without it, each completion interrupts the loop with task work, and the
     * prototype ran at 0.6x the epoll server; COOP_TASKRUN alone, 0.8x. */
    int err = io_uring_queue_init(4096, &ring, IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN);
    if (err == -EINVAL) /* before Linux 6.1 */
        err = io_uring_queue_init(4096, &ring, IORING_SETUP_COOP_TASKRUN);
    if (err < 0) {
        fprintf(stderr, "io_uring_queue_init: %s\n", strerror(-err));
        return 1;
    }
    arm_accept(listener);
    for (;;) {
        io_uring_submit_and_wait(&ring, 1);
        struct io_uring_cqe *cqe;
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&ring, head, cqe) {
            completed(cqe, listener);
            seen++;
        }
        io_uring_cq_advance(&ring, seen);
    }
}
