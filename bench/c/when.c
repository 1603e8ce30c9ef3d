/* bench/short.sh's program per connection without the shell (EXEC=static):
 * the date line that `date -u` prints. Linked static, so that what the run
 * measures is the superservers' spawning and not the dynamic loader. */
#include <stdio.h>
#include <time.h>
int main(void) {
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    char line[64];
    strftime(line, sizeof line, "%a %b %e %H:%M:%S UTC %Y\n", &tm);
    fputs(line, stdout);
    return 0;
}
