/*
 * clockstep: an LD_PRELOAD shim that steps one process's wall clock, as settimeofday(2) or an NTP step would.
 *
 * Why: a clock step hits CLOCK_REALTIME only; CLOCK_MONOTONIC and CLOCK_BOOTTIME go on as before. The fault
 * suite steps one broker's clock (a leader's, the controller's) forward and back without touching the machine's
 * (tests/chaos/faults_time.py). Time namespaces offset the monotonic clocks only, and libfaketime either steps
 * the monotonic clock too or breaks Python's sleeps, so this shim does the one thing: clock_gettime() for the
 * REALTIME clocks, gettimeofday() and time() return the real value plus the offset, in milliseconds, that the
 * file named by CHAOS_CLOCK_OFFSET_FILE holds (re-read at most every 20 ms of monotonic time; no file: 0).
 *
 * Built by the suite with the machine's C compiler (topology.py); never part of a broker.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int (*real_clock_gettime)(clockid_t, struct timespec *);
static volatile long long offset_ns;
static volatile long long next_read_ns;

static long long monotonic_ns(void) {
    struct timespec t;
    syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void refresh(void) {
    long long now = monotonic_ns();
    if (now < next_read_ns)
        return;
    next_read_ns = now + 20000000LL;
    const char *path = getenv("CHAOS_CLOCK_OFFSET_FILE");
    if (path == NULL)
        return;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    char buf[64];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n > 0) {
        buf[n] = 0;
        offset_ns = strtoll(buf, NULL, 10) * 1000000LL;
    }
}

static void shift(struct timespec *ts) {
    refresh();
    long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + offset_ns;
    ts->tv_sec = ns / 1000000000LL;
    ts->tv_nsec = ns % 1000000000LL;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    if (real_clock_gettime == NULL)
        real_clock_gettime = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    int r = real_clock_gettime(id, ts);
    if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE))
        shift(ts);
    return r;
}

int gettimeofday(struct timeval *tv, void *tz) {
    struct timespec ts;
    int r = clock_gettime(CLOCK_REALTIME, &ts);
    if (r == 0 && tv != NULL) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    (void)tz;
    return r;
}

time_t time(time_t *out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out != NULL)
        *out = ts.tv_sec;
    return ts.tv_sec;
}
