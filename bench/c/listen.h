/* The C reference servers' shared setup: a loopback address and a listening
 * socket on it (SO_REUSEADDR, backlog 1024), exiting with a message if the
 * port cannot be had. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

static struct sockaddr_in loopback(const char *port) {
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(atoi(port))};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return addr;
}

/* `flags`: extra socket(2) type flags, such as SOCK_NONBLOCK. */
static int listen_loopback(const char *port, int flags) {
    int listener = socket(AF_INET, SOCK_STREAM | flags, 0);
    int one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = loopback(port);
    if (bind(listener, (struct sockaddr *)&addr, sizeof addr) || listen(listener, 1024)) {
        perror("listen");
        exit(1);
    }
    return listener;
}
