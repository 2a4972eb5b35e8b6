/* LD_PRELOAD shim for tests/comm/test_horovod_race.py: holds the thread that enqueues a chosen
 * Horovod op between Horovod's shut_down check and its tensor queue, for as long as the test says.
 *
 * Horovod 0.28.1 logs "Enqueued <names>" (LOG(TRACE), operations.cc) after EnqueueTensorAllreduces
 * read horovod_global.shut_down and before it calls AddToTensorQueueMulti; the project's patch
 * (scripts/horovod/tensor_queue.patch) adds "Enqueueing broadcast <name>" at the same place of
 * EnqueueTensorBroadcast, before AddToTensorQueue. Horovod's own calls cannot be interposed (it is
 * linked -Bsymbolic-functions with a version script), but the log line leaves it through
 * libstdc++'s std::cout, which writes with libc's fwrite: interposed here.
 *
 * HOLD_ENQUEUE_MATCH: the text to wait for ("Enqueued race_probe;"). HOLD_ENQUEUE_DIR: a
 * directory; the first write that carries the text creates DIR/held, then waits (polling every
 * 10 ms) until DIR/release exists, then writes and returns. Only the first match is held; every
 * other write passes straight through.
 *
 * The hold has a bound, HOLD_ENQUEUE_BOUND_S seconds (60 unless given), so that a test that never
 * releases cannot leave the thread held for ever. A thread let go at that bound, not by the test,
 * proves nothing (a shutdown slower than the bound would let the op reach the queue before it was
 * finalised, and an unpatched Horovod would pass): the shim then creates DIR/timed_out, which
 * holds that sentence, and says it on stderr; the test fails on that file whatever else it saw.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_HOLD_S 60

static int held_once;

static void put(int fd, const char *text) {
  size_t left = strlen(text);
  while (left > 0) {
    ssize_t n = write(fd, text, left);
    if (n <= 0) return;
    text += n;
    left -= (size_t)n;
  }
}

static void hold(const char *dir) {
  char path[4096];
  const char *bound_text = getenv("HOLD_ENQUEUE_BOUND_S");
  double bound = bound_text && *bound_text ? atof(bound_text) : DEFAULT_HOLD_S;
  snprintf(path, sizeof path, "%s/held", dir);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) close(fd);
  snprintf(path, sizeof path, "%s/release", dir);
  struct timespec tick = {0, 10 * 1000 * 1000};
  long ticks = (long)(bound * 100);
  for (long i = 0; i < ticks; i++) {
    if (access(path, F_OK) == 0) return;
    nanosleep(&tick, NULL);
  }
  if (access(path, F_OK) == 0) return;
  /* Not released: say so where the test looks, and on stderr (write(2): fwrite is this shim's). */
  char line[256];
  snprintf(line, sizeof line,
           "hold_enqueue: released the held thread on its own bound (%g s), not on the test's "
           "signal: the ordering was not forced\n", bound);
  snprintf(path, sizeof path, "%s/timed_out", dir);
  fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    put(fd, line);
    close(fd);
  }
  put(2, line);
}

size_t fwrite(const void *ptr, size_t size, size_t n, FILE *stream) {
  static size_t (*real)(const void *, size_t, size_t, FILE *);
  if (!real) real = (size_t(*)(const void *, size_t, size_t, FILE *))dlsym(RTLD_NEXT, "fwrite");
  const char *match = getenv("HOLD_ENQUEUE_MATCH");
  const char *dir = getenv("HOLD_ENQUEUE_DIR");
  if (match && dir && *match && !__atomic_load_n(&held_once, __ATOMIC_SEQ_CST) &&
      memmem(ptr, size * n, match, strlen(match)) &&
      !__atomic_exchange_n(&held_once, 1, __ATOMIC_SEQ_CST))
    hold(dir);
  return real(ptr, size, n, stream);
}
