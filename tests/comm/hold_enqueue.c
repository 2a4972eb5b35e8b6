/* LD_PRELOAD shim for tests/comm/test_horovod_race.py: holds the thread that enqueues a chosen
 * Horovod op between Horovod's shut_down check and its tensor queue, for as long as the test says.
 *
 * Horovod 0.28.1 logs "Enqueued <names>" (LOG(TRACE), operations.cc) after EnqueueTensorAllreduces
 * read horovod_global.shut_down and before it calls AddToTensorQueueMulti. Horovod's own calls
 * cannot be interposed (it is linked -Bsymbolic-functions with a version script), but the log line
 * leaves it through libstdc++'s std::cout, which writes with libc's fwrite: interposed here.
 *
 * HOLD_ENQUEUE_MATCH: the text to wait for ("Enqueued race_probe;"). HOLD_ENQUEUE_DIR: a
 * directory; the first write that carries the text creates DIR/held, then waits (polling every
 * 10 ms, at most HOLD_S) until DIR/release exists, then writes and returns. Only the first match
 * is held; every other write passes straight through.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define HOLD_S 60

static int held_once;

static void hold(const char *dir) {
  char path[4096];
  snprintf(path, sizeof path, "%s/held", dir);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) close(fd);
  snprintf(path, sizeof path, "%s/release", dir);
  struct timespec tick = {0, 10 * 1000 * 1000};
  for (int i = 0; i < HOLD_S * 100 && access(path, F_OK) != 0; i++) nanosleep(&tick, NULL);
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
