/* Calls tick() about every 200 us for TOTAL_MS (argv[1]), and trigger() at each of the
 * millisecond offsets given after it. Prints "trigger <ms>" when it does. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

volatile long sink;

__attribute__((noinline)) long tick(long i)
{
  sink += i;
  return i;
}

__attribute__((noinline)) void trigger(void)
{
  sink++;
}

static double now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
  double total = argc > 1 ? atof(argv[1]) : 1000;
  int next = 2;
  double t0 = now_ms();
  struct timespec pause = {0, 200 * 1000};
  for (long i = 0;; i++) {
    double t = now_ms() - t0;
    if (t >= total)
      break;
    if (next < argc && t >= atof(argv[next])) {
      trigger();
      printf("trigger %s\n", argv[next]);
      next++;
    }
    tick(i);
    nanosleep(&pause, NULL);
  }
  fflush(stdout);
  return 0;
}
