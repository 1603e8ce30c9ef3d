/* The machine's limit for short TCPMUX-like connections: a minimal
 * single-threaded epoll server doing what tcpmuxd does for `daytime`, and
 * nothing else. accept4, read to '\n', one write of "+\r\n" and a daytime
 * line, shutdown(SHUT_WR), read to EOF, close. No lookup, no log, no timer.
 * Built and run by bench/limit.sh: limit PORT. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "listen.h"

enum { READING, DRAINING };

struct conn {
    int fd;
    int state;
    size_t seen;
};

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: limit PORT\n");
        return 2;
    }
    int listener = listen_loopback(argv[1], SOCK_NONBLOCK);
    int one = 1;
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(ep, EPOLL_CTL_ADD, listener, &ev);
    struct epoll_event events[256];
    char buf[4096];
    for (;;) {
        int n = epoll_wait(ep, events, 256, -1);
        for (int i = 0; i < n; i++) {
            struct conn *c = events[i].data.ptr;
            if (!c) {
                int fd;
                while ((fd = accept4(listener, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    c = calloc(1, sizeof *c);
                    c->fd = fd;
                    struct epoll_event cev = {.events = EPOLLIN, .data.ptr = c};
                    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &cev);
                }
                continue;
            }
            ssize_t got = read(c->fd, buf, sizeof buf);
            if (got < 0 && errno == EAGAIN) continue;
            if (got <= 0) { /* EOF (or error): done */
                close(c->fd);
                free(c);
                continue;
            }
            if (c->state == READING && memchr(buf, '\n', got)) {
                time_t now = time(NULL);
                struct tm tm;
                gmtime_r(&now, &tm);
                char reply[128];
                size_t len = strftime(reply, sizeof reply, "+\r\n%A, %B %d, %Y %H:%M:%S-UTC\r\n", &tm);
                (void)!write(c->fd, reply, len);
                shutdown(c->fd, SHUT_WR);
                c->state = DRAINING;
            }
        }
    }
}
