/* polar-relay: the only way out of a gateway-only sandbox (Docker network "none").
 *
 *   polar-relay serve PORT SOCKET   listen on 127.0.0.1:PORT, forward every connection to the Unix socket SOCKET
 *   polar-relay probe PORT SOCKET   exit 0 once 127.0.0.1:PORT accepts and SOCKET connects (retries for 10 s)
 *
 * One forked child per connection copies bytes both ways with poll(); an EOF on one side is passed on as a
 * half-close (shutdown SHUT_WR), so the gateway sees a client hang up exactly as it would over TCP. Static, no libc
 * name lookups: it runs in any instance image. */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

static int tcp_addr(const char *port, struct sockaddr_in *a) {
    long p = strtol(port, NULL, 10);
    if (p <= 0 || p > 65535) return -1;
    memset(a, 0, sizeof *a);
    a->sin_family = AF_INET;
    a->sin_port = htons((unsigned short)p);
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return 0;
}

static int unix_connect(const char *path) {
    struct sockaddr_un a;
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0 || strlen(path) >= sizeof a.sun_path) return -1;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    strcpy(a.sun_path, path);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) { close(fd); return -1; }
    return fd;
}

static void pump(int c, int u) {
    struct pollfd p[2] = {{c, POLLIN, 0}, {u, POLLIN, 0}};
    int open_in[2] = {1, 1};
    char buf[65536];
    while (open_in[0] || open_in[1]) {
        if (poll(p, 2, -1) < 0) { if (errno == EINTR) continue; return; }
        for (int i = 0; i < 2; i++) {
            if (!open_in[i] || !(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            int from = i ? u : c, to = i ? c : u;
            ssize_t n = read(from, buf, sizeof buf);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {  /* EOF (or a reset): pass the half-close on */
                if (n < 0) return;
                open_in[i] = 0; p[i].fd = -1; shutdown(to, SHUT_WR);
                continue;
            }
            for (ssize_t off = 0; off < n;) {
                ssize_t w = write(to, buf + off, (size_t)(n - off));
                if (w < 0) { if (errno == EINTR) continue; return; }
                off += w;
            }
        }
    }
}

static int serve(const char *port, const char *path) {
    struct sockaddr_in a;
    int one = 1, s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0 || tcp_addr(port, &a) < 0) { fprintf(stderr, "polar-relay: bad port %s\n", port); return 2; }
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(s, (struct sockaddr *)&a, sizeof a) < 0 || listen(s, 1024) < 0) {
        fprintf(stderr, "polar-relay: listening on 127.0.0.1:%s: %s\n", port, strerror(errno));
        return 1;
    }
    signal(SIGCHLD, SIG_IGN);  /* children are reaped by the kernel */
    signal(SIGPIPE, SIG_IGN);
    for (;;) {
        int c = accept(s, NULL, NULL);
        if (c < 0) { if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE) continue; return 1; }
        pid_t pid = fork();
        if (pid == 0) {
            close(s);
            int u = unix_connect(path);
            if (u >= 0) pump(c, u);
            _exit(0);
        }
        close(c);
    }
}

static int probe(const char *port, const char *path) {
    struct sockaddr_in a;
    struct timespec pause = {0, 50 * 1000 * 1000};
    if (tcp_addr(port, &a) < 0) return 2;
    for (int i = 0; i < 200; i++) {
        int u = unix_connect(path);
        int t = socket(AF_INET, SOCK_STREAM, 0);
        int ok = u >= 0 && t >= 0 && connect(t, (struct sockaddr *)&a, sizeof a) == 0;
        if (u >= 0) close(u);
        if (t >= 0) close(t);
        if (ok) return 0;
        nanosleep(&pause, NULL);
    }
    if (access(path, F_OK) != 0) fprintf(stderr, "polar-relay: no gateway socket at %s\n", path);
    else fprintf(stderr, "polar-relay: 127.0.0.1:%s or %s does not accept connections\n", port, path);
    return 1;
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "serve") == 0) return serve(argv[2], argv[3]);
    if (argc == 4 && strcmp(argv[1], "probe") == 0) return probe(argv[2], argv[3]);
    fprintf(stderr, "usage: polar-relay serve|probe PORT SOCKET\n");
    return 2;
}
