/* Two threads asleep for good, one in poll() and one in nanosleep(), each counting the times
 * a signal cut its sleep short (EINTR); the program installs no handler, so any EINTR is
 * another's signal: ada's thread hold. work() is there to be hooked (never called). Prints
 * "ready"; on a line on stdin, or its end, prints "interrupted N" and exits.
 * `cut_sleeps flicker`: each thread spins 200 us, then sleeps 1 ms, over and over: seen on a
 * CPU now and then, and asleep soon after (scripts/hold_race_probe.py). */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static long interrupted;
static int flicker;  /* sleeps of 1 ms after 200 us on a CPU, rather than sleeps for good */

static void spin(void)
{
  struct timespec start, now;

  clock_gettime(CLOCK_MONOTONIC, &start);
  do
    clock_gettime(CLOCK_MONOTONIC, &now);
  while ((now.tv_sec - start.tv_sec) * 1000000000L + now.tv_nsec - start.tv_nsec < 200000);
}

__attribute__((noinline)) long work(long x)
{
  return x + 1;
}

static void *polls(void *arg)
{
  (void) arg;
  for (;;) {
    if (flicker)
      spin();
    if (poll(NULL, 0, flicker ? 1 : 600000) < 0 && errno == EINTR)
      __atomic_add_fetch(&interrupted, 1, __ATOMIC_SEQ_CST);
  }
  return NULL;
}

static void *naps(void *arg)
{
  (void) arg;
  for (;;) {
    struct timespec ts = { flicker ? 0 : 600, flicker ? 1000000 : 0 };

    if (flicker)
      spin();
    if (nanosleep(&ts, NULL) != 0 && errno == EINTR)
      __atomic_add_fetch(&interrupted, 1, __ATOMIC_SEQ_CST);
  }
  return NULL;
}

int main(int argc, char **argv)
{
  pthread_t a, b;
  char line[16];

  flicker = argc > 1;
  setvbuf(stdout, NULL, _IOLBF, 0);
  pthread_create(&a, NULL, polls, NULL);
  pthread_create(&b, NULL, naps, NULL);
  usleep(50000);  /* both asleep */
  printf("ready\n");
  if (read(0, line, sizeof line) < 0)
    perror("read");
  printf("interrupted %ld\n", __atomic_load_n(&interrupted, __ATOMIC_SEQ_CST));
  return 0;
}
