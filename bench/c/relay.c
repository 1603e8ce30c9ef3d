/* The machine's limit for proxied short connections (issue "Performance
 * III"): a minimal single-threaded epoll relay doing what tcpmuxd does for a
 * `proxy` service, and nothing else. accept4, read to '\n' (bytes past it are
 * kept for the backend), a non-blocking connect to the backend, "+\r\n" to
 * the client once connected, then splice(2) both ways through a pipe per
 * direction, each EOF passed on as shutdown(SHUT_WR), close when both
 * directions have ended. No lookup, no log, no timer, no limits.
 * Built and run by bench/proxy_short.sh: relay PORT BACKEND_PORT. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "listen.h"

/* One direction: bytes read from `from` wait in `pipe` for `to`. */
struct flow {
    int from, to;
    int pipe[2];
    size_t pending;
    int ended; /* `from` reached EOF and `to` was shut down */
};

struct conn {
    int client, backend;
    int relaying, dead;
    char line[512];
    size_t seen, early; /* bytes read; bytes past the line */
    struct flow up, down;
};

static int ep;
static struct sockaddr_in backend_addr;
/* Freed after the batch of events they ended in: a later event of that batch
 * may still point to them. */
static struct conn *dead[512];
static int ndead;

static void watch(int op, int fd, unsigned events, struct conn *c) {
    struct epoll_event ev = {.events = events, .data.ptr = c};
    epoll_ctl(ep, op, fd, &ev);
}

static void finish(struct conn *c) {
    close(c->client);
    if (c->backend >= 0)
        close(c->backend);
    if (c->relaying) {
        close(c->up.pipe[0]), close(c->up.pipe[1]);
        close(c->down.pipe[0]), close(c->down.pipe[1]);
    }
    c->dead = 1;
    dead[ndead++] = c;
}

/* Moves what `from` has to `to` until either would block; 0, or -1 on error. */
static int pump(struct flow *f) {
    while (!f->ended) {
        if (f->pending) {
            ssize_t out = splice(f->pipe[0], NULL, f->to, NULL, f->pending, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
            if (out < 0)
                return errno == EAGAIN ? 0 : -1;
            f->pending -= out;
            continue;
        }
        ssize_t in = splice(f->from, NULL, f->pipe[1], NULL, 65536, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
        if (in < 0)
            return errno == EAGAIN ? 0 : -1;
        if (in == 0) {
            shutdown(f->to, SHUT_WR);
            f->ended = 1;
        }
        f->pending = in;
    }
    return 0;
}

static void connected(struct conn *c) {
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(c->backend, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err || pipe2(c->up.pipe, O_NONBLOCK) || pipe2(c->down.pipe, O_NONBLOCK)) {
        (void)!write(c->client, "-backend unavailable\r\n", 22);
        finish(c);
        return;
    }
    c->relaying = 1;
    c->up = (struct flow){.from = c->client, .to = c->backend, .pipe = {c->up.pipe[0], c->up.pipe[1]}};
    c->down = (struct flow){.from = c->backend, .to = c->client, .pipe = {c->down.pipe[0], c->down.pipe[1]}};
    (void)!write(c->client, "+\r\n", 3);
    if (c->early)
        (void)!write(c->backend, c->line + c->seen - c->early, c->early);
    watch(EPOLL_CTL_MOD, c->backend, EPOLLIN | EPOLLOUT | EPOLLET, c);
    watch(EPOLL_CTL_ADD, c->client, EPOLLIN | EPOLLOUT | EPOLLET, c);
}

static void request(struct conn *c) {
    ssize_t got = read(c->client, c->line + c->seen, sizeof c->line - c->seen);
    if (got < 0 && errno == EAGAIN)
        return;
    if (got <= 0 || c->seen + got == sizeof c->line) {
        finish(c);
        return;
    }
    char *nl = memchr(c->line + c->seen, '\n', got);
    c->seen += got;
    if (!nl)
        return;
    c->early = c->line + c->seen - (nl + 1);
    c->backend = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    int one = 1;
    setsockopt(c->backend, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(c->backend, (struct sockaddr *)&backend_addr, sizeof backend_addr) && errno != EINPROGRESS) {
        finish(c);
        return;
    }
    watch(EPOLL_CTL_DEL, c->client, 0, c);
    watch(EPOLL_CTL_ADD, c->backend, EPOLLOUT, c);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: relay PORT BACKEND_PORT\n");
        return 2;
    }
    int listener = listen_loopback(argv[1], SOCK_NONBLOCK);
    int one = 1;
    /* Accepted sockets inherit it: no setsockopt per connection. */
    setsockopt(listener, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    backend_addr = loopback(argv[2]);
    ep = epoll_create1(0);
    watch(EPOLL_CTL_ADD, listener, EPOLLIN, NULL);
    struct epoll_event events[256];
    for (;;) {
        int n = epoll_wait(ep, events, 256, -1);
        for (int i = 0; i < n; i++) {
            struct conn *c = events[i].data.ptr;
            if (c && c->dead)
                continue;
            if (!c) {
                int fd;
                while ((fd = accept4(listener, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    c = calloc(1, sizeof *c);
                    c->client = fd;
                    c->backend = -1;
                    watch(EPOLL_CTL_ADD, fd, EPOLLIN, c);
                }
                continue;
            }
            if (c->relaying) {
                if (pump(&c->up) || pump(&c->down) || (c->up.ended && c->down.ended && !c->up.pending && !c->down.pending))
                    finish(c);
            } else if (c->backend >= 0) {
                connected(c);
            } else {
                request(c);
            }
        }
        while (ndead)
            free(dead[--ndead]);
    }
}
