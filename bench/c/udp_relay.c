/* The floor of tcpmuxd's UDP design (issue "One port for datagrams too"): a
 * minimal single-threaded epoll relay doing what a UDP listener with
 * `proxy_udp` does, and nothing else. The listener's datagrams read 16 at a
 * time (recvmmsg); each client address gets a socket of its own connected
 * to the backend (so the backend tells clients apart by source port), its
 * datagrams sent there one by one; a backend socket's replies read 16 at a
 * time and sent back to the client from the listener, all of a turn's
 * replies in one sendmmsg. A batch shorter than 16 drained its socket (no
 * read for EAGAIN). No detection, limits, timeouts, eviction or counters.
 * Built and run by bench/udp.sh: udp_relay PORT BACKEND_PORT. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "listen.h"

#define BATCH 16
#define SIZE 2048
#define FLOWS 65536 /* a power of two: open addressing by address */

struct flow {
    struct sockaddr_in client;
    int fd; /* 0: empty slot */
};

static struct flow flows[FLOWS];
static struct sockaddr_in backend;
static int listener, ep;

/* Replies waiting for the turn's one sendmmsg. */
static char out_buf[BATCH][SIZE];
static struct mmsghdr out[BATCH];
static struct iovec out_iov[BATCH];
static struct sockaddr_in out_to[BATCH];
static int out_n;

static void flush(void) {
    for (int sent = 0; sent < out_n;) {
        int n = sendmmsg(listener, out + sent, out_n - sent, 0);
        if (n <= 0)
            break; /* a full buffer drops the rest, as UDP may */
        sent += n;
    }
    out_n = 0;
}

static struct flow *flow_of(const struct sockaddr_in *from) {
    unsigned h = (ntohl(from->sin_addr.s_addr) * 2654435761u) ^ (ntohs(from->sin_port) * 40503u);
    for (unsigned i = 0; i < FLOWS; i++) {
        struct flow *f = &flows[(h + i) & (FLOWS - 1)];
        if (f->fd == 0) {
            int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
            if (fd < 0 || connect(fd, (struct sockaddr *)&backend, sizeof backend)) {
                if (fd >= 0)
                    close(fd);
                return NULL;
            }
            f->client = *from;
            f->fd = fd;
            struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.ptr = f};
            epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
            return f;
        }
        if (f->client.sin_addr.s_addr == from->sin_addr.s_addr && f->client.sin_port == from->sin_port)
            return f;
    }
    return NULL;
}

static void from_clients(void) {
    static char buf[BATCH][SIZE];
    static struct mmsghdr msgs[BATCH];
    static struct iovec iov[BATCH];
    static struct sockaddr_in from[BATCH];
    for (;;) {
        for (int i = 0; i < BATCH; i++) {
            iov[i] = (struct iovec){buf[i], SIZE};
            msgs[i].msg_hdr = (struct msghdr){.msg_name = &from[i], .msg_namelen = sizeof from[i],
                                              .msg_iov = &iov[i], .msg_iovlen = 1};
        }
        int n = recvmmsg(listener, msgs, BATCH, MSG_DONTWAIT, NULL);
        for (int i = 0; i < n; i++) {
            struct flow *f = flow_of(&from[i]);
            if (f)
                (void)!send(f->fd, buf[i], msgs[i].msg_len, MSG_DONTWAIT);
        }
        if (n < BATCH)
            return;
    }
}

static void from_backend(struct flow *f) {
    for (;;) {
        int room = BATCH - out_n;
        if (room == 0) {
            flush();
            room = BATCH;
        }
        struct mmsghdr msgs[BATCH];
        for (int i = 0; i < room; i++) {
            out_iov[out_n + i] = (struct iovec){out_buf[out_n + i], SIZE};
            msgs[i].msg_hdr = (struct msghdr){.msg_iov = &out_iov[out_n + i], .msg_iovlen = 1};
        }
        int n = recvmmsg(f->fd, msgs, room, MSG_DONTWAIT, NULL);
        for (int i = 0; i < n; i++) {
            int k = out_n + i;
            out_iov[k].iov_len = msgs[i].msg_len;
            out_to[k] = f->client;
            out[k].msg_hdr = (struct msghdr){.msg_name = &out_to[k], .msg_namelen = sizeof out_to[k],
                                             .msg_iov = &out_iov[k], .msg_iovlen = 1};
        }
        if (n > 0)
            out_n += n;
        if (n < room)
            return;
    }
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: udp_relay PORT BACKEND_PORT\n");
        return 2;
    }
    (void)listen_loopback; /* listen.h's TCP half */
    struct sockaddr_in addr = loopback(argv[1]);
    backend = loopback(argv[2]);
    listener = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    if (bind(listener, (struct sockaddr *)&addr, sizeof addr)) {
        perror("bind");
        return 1;
    }
    ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.ptr = NULL};
    epoll_ctl(ep, EPOLL_CTL_ADD, listener, &ev);
    struct epoll_event ready[64];
    for (;;) {
        int n = epoll_wait(ep, ready, 64, -1);
        for (int i = 0; i < n; i++) {
            if (ready[i].data.ptr == NULL)
                from_clients();
            else
                from_backend(ready[i].data.ptr);
        }
        flush();
    }
}
