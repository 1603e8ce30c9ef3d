/* The ceiling for a program per connection: no network, no server, only
 * posix_spawn (vfork and exec, as tcpmuxd and glibc do it) and wait, keeping
 * PARALLEL children running for SECONDS, the program's stdout to /dev/null.
 * No superserver that runs PROGRAM per connection can go faster on this
 * machine. Prints one JSON row in tcpmux-bench's format (latencies are
 * spawn-to-exit). Built and run by bench/short.sh:
 *   spawn PROGRAM SECONDS PARALLEL LABEL */
#define _GNU_SOURCE
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>

extern char **environ;

enum { MAX_SAMPLES = 1 << 20, MAX_CHILDREN = 1024 };

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: spawn PROGRAM SECONDS PARALLEL LABEL\n");
        return 2;
    }
    double seconds = atof(argv[2]);
    int parallel = atoi(argv[3]);
    if (parallel < 1 || parallel > MAX_CHILDREN) parallel = 1;
    char *args[] = {argv[1], NULL};
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    static pid_t pids[MAX_CHILDREN];
    static double began[MAX_CHILDREN];
    double *took = malloc(sizeof *took * MAX_SAMPLES);
    long done = 0, failed = 0;
    int running = 0;
    double start = now(), end = start + seconds;
    for (;;) {
        double t = now();
        while (t < end && running < parallel) {
            int slot = 0;
            while (pids[slot]) slot++;
            if (posix_spawn(&pids[slot], argv[1], &actions, NULL, args, environ)) {
                perror("posix_spawn");
                return 1;
            }
            began[slot] = t;
            running++;
        }
        if (!running) break;
        int status;
        pid_t pid = wait(&status);
        for (int slot = 0; slot < MAX_CHILDREN; slot++) {
            if (pids[slot] != pid) continue;
            pids[slot] = 0;
            running--;
            if (!WIFEXITED(status) || WEXITSTATUS(status)) failed++;
            else if (done < MAX_SAMPLES) took[done++] = now() - began[slot];
            break;
        }
    }
    double elapsed = now() - start;
    qsort(took, done, sizeof *took, by_value);
#define AT(q) (done ? (long)(took[(long)((done - 1) * (q))] * 1e6) : 0)
    printf("{\"label\":\"%s\",\"per_second\":%.1f,\"p50_us\":%ld,\"p99_us\":%ld,"
           "\"p999_us\":%ld,\"failed\":%ld}\n",
           argv[4], done / elapsed, AT(0.5), AT(0.99), AT(0.999), failed);
    return 0;
}
