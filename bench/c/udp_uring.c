/* udp_relay.c's design on io_uring instead of epoll (issue "One port for
 * datagrams too"), to measure what io_uring could give a UDP front on this
 * kernel: the listener's datagrams come from one multishot recvmsg, each
 * flow's replies from one multishot recv on its connected socket, both into
 * buffers the kernel picks from a provided-buffer ring; each datagram goes
 * on from the buffer it arrived in (a send to the flow's socket, a sendmsg
 * from the listener to the client), and the buffer goes back to the ring
 * when that send completes. Every turn is one io_uring_enter: the turn's
 * sends submitted and the next completions waited for; no readiness step, no
 * system call per datagram (IORING_SETUP_DEFER_TASKRUN, Linux 6.1). As
 * udp_relay.c: no detection, limits, timeouts, eviction or counters.
 * Built and run by bench/udp.sh (needs liburing-dev): udp_uring PORT BACKEND_PORT. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <liburing.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "listen.h"

#define SIZE 2048
#define NBUF 4096 /* a power of two, as the buffer ring wants */
#define FLOWS 65536
#define GROUP 0

enum op { FROM_CLIENTS, FROM_BACKEND, TO_BACKEND, TO_CLIENT };

struct flow {
    struct sockaddr_in client;
    int fd; /* 0: empty slot */
};

static struct flow flows[FLOWS];
static struct sockaddr_in backend;
static int listener;
static struct io_uring ring;
static struct io_uring_buf_ring *br;
static char *bufs;
static int returned; /* buffers given back since the ring's tail last moved */

/* Per buffer, what a sendmsg from it to a client needs kept until it completes. */
static struct msghdr out_msg[NBUF];
static struct iovec out_iov[NBUF];
static struct sockaddr_in out_to[NBUF];

/* The listener's multishot recvmsg asks for the source address only. */
static struct msghdr in_msg = {.msg_namelen = sizeof(struct sockaddr_in)};

static struct io_uring_sqe *sqe(void) {
    struct io_uring_sqe *s;
    while (!(s = io_uring_get_sqe(&ring)))
        io_uring_submit(&ring);
    return s;
}

static void tag(struct io_uring_sqe *s, enum op op, unsigned index) {
    io_uring_sqe_set_data64(s, (uint64_t)index << 8 | op);
}

static void give_back(unsigned bid) {
    io_uring_buf_ring_add(br, bufs + (size_t)bid * SIZE, SIZE, bid, io_uring_buf_ring_mask(NBUF), returned++);
}

static void arm_listener(void) {
    struct io_uring_sqe *s = sqe();
    io_uring_prep_recvmsg_multishot(s, listener, &in_msg, 0);
    s->flags |= IOSQE_BUFFER_SELECT;
    s->buf_group = GROUP;
    tag(s, FROM_CLIENTS, 0);
}

static void arm_flow(unsigned index) {
    struct io_uring_sqe *s = sqe();
    io_uring_prep_recv_multishot(s, flows[index].fd, NULL, 0, 0);
    s->flags |= IOSQE_BUFFER_SELECT;
    s->buf_group = GROUP;
    tag(s, FROM_BACKEND, index);
}

/* The slot of this client's flow, opened (socket, connect, armed) if new; -1 if none can be. */
static int flow_of(const struct sockaddr_in *from) {
    unsigned h = (ntohl(from->sin_addr.s_addr) * 2654435761u) ^ (ntohs(from->sin_port) * 40503u);
    for (unsigned i = 0; i < FLOWS; i++) {
        unsigned k = (h + i) & (FLOWS - 1);
        struct flow *f = &flows[k];
        if (f->fd == 0) {
            int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
            if (fd < 0 || connect(fd, (struct sockaddr *)&backend, sizeof backend)) {
                if (fd >= 0)
                    close(fd);
                return -1;
            }
            f->client = *from;
            f->fd = fd;
            arm_flow(k);
            return (int)k;
        }
        if (f->client.sin_addr.s_addr == from->sin_addr.s_addr && f->client.sin_port == from->sin_port)
            return (int)k;
    }
    return -1;
}

static void from_clients(struct io_uring_cqe *c, unsigned bid) {
    char *buf = bufs + (size_t)bid * SIZE;
    struct io_uring_recvmsg_out *o = io_uring_recvmsg_validate(buf, c->res, &in_msg);
    int k = -1;
    if (o && o->namelen == sizeof(struct sockaddr_in) && !(o->flags & MSG_TRUNC))
        k = flow_of(io_uring_recvmsg_name(o));
    if (k < 0) {
        give_back(bid);
        return;
    }
    struct io_uring_sqe *s = sqe();
    io_uring_prep_send(s, flows[k].fd, io_uring_recvmsg_payload(o, &in_msg),
                       io_uring_recvmsg_payload_length(o, c->res, &in_msg), 0);
    tag(s, TO_BACKEND, bid);
}

static void from_backend(struct io_uring_cqe *c, unsigned index, unsigned bid) {
    out_iov[bid] = (struct iovec){bufs + (size_t)bid * SIZE, (size_t)c->res};
    out_to[bid] = flows[index].client;
    out_msg[bid] = (struct msghdr){.msg_name = &out_to[bid], .msg_namelen = sizeof out_to[bid],
                                   .msg_iov = &out_iov[bid], .msg_iovlen = 1};
    struct io_uring_sqe *s = sqe();
    io_uring_prep_sendmsg(s, listener, &out_msg[bid], 0);
    tag(s, TO_CLIENT, bid);
}

static void complete(struct io_uring_cqe *c) {
    enum op op = c->user_data & 0xff;
    unsigned index = c->user_data >> 8;
    int has_buf = c->flags & IORING_CQE_F_BUFFER;
    unsigned bid = c->flags >> IORING_CQE_BUFFER_SHIFT;
    switch (op) {
    case FROM_CLIENTS:
        if (has_buf)
            from_clients(c, bid);
        if (!(c->flags & IORING_CQE_F_MORE))
            arm_listener(); /* out of buffers (ENOBUFS) or ended: ask again */
        break;
    case FROM_BACKEND:
        if (has_buf) {
            if (c->res > 0)
                from_backend(c, index, bid);
            else
                give_back(bid);
        }
        if (!(c->flags & IORING_CQE_F_MORE) && c->res != -ECONNREFUSED)
            arm_flow(index);
        break;
    case TO_BACKEND:
    case TO_CLIENT:
        give_back(index); /* sent or not (a full buffer drops it, as UDP may) */
        break;
    }
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: udp_uring PORT BACKEND_PORT\n");
        return 2;
    }
    (void)listen_loopback; /* listen.h's TCP half */
    struct sockaddr_in addr = loopback(argv[1]);
    backend = loopback(argv[2]);
    listener = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    /* A ring's sockets close after its process has gone (the ring is torn
     * down in the background): a restart on the same port waits for them. */
    for (int tries = 0; bind(listener, (struct sockaddr *)&addr, sizeof addr); tries++) {
        if (errno != EADDRINUSE || tries == 500) {
            perror("bind");
            return 1;
        }
        usleep(10000);
    }
    struct io_uring_params p = {.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_CQSIZE,
                                .cq_entries = 4 * NBUF};
    int err = io_uring_queue_init_params(1024, &ring, &p);
    if (err) {
        fprintf(stderr, "io_uring_queue_init: %s\n", strerror(-err));
        return 1;
    }
    size_t ring_bytes = NBUF * sizeof(struct io_uring_buf);
    br = mmap(NULL, ring_bytes, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
    bufs = malloc((size_t)NBUF * SIZE);
    if (br == MAP_FAILED || !bufs) {
        perror("buffers");
        return 1;
    }
    io_uring_buf_ring_init(br);
    struct io_uring_buf_reg reg = {.ring_addr = (uintptr_t)br, .ring_entries = NBUF, .bgid = GROUP};
    if ((err = io_uring_register_buf_ring(&ring, &reg, 0))) {
        fprintf(stderr, "io_uring_register_buf_ring: %s\n", strerror(-err));
        return 1;
    }
    for (unsigned bid = 0; bid < NBUF; bid++)
        give_back(bid);
    io_uring_buf_ring_advance(br, returned);
    returned = 0;
    arm_listener();
    for (;;) {
        io_uring_submit_and_wait(&ring, 1);
        struct io_uring_cqe *c;
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&ring, head, c) {
            complete(c);
            seen++;
        }
        io_uring_cq_advance(&ring, seen);
        io_uring_buf_ring_advance(br, returned);
        returned = 0;
    }
}
