/* Benchmark target: THREADS threads each call small() CALLS times (argv[1], argv[2]) and the
 * program prints the call rate it saw (the loop timed with CLOCK_MONOTONIC). With argv[3], it
 * first says so and waits for that file to exist (so a tracer can attach first); with argv[4],
 * it waits for that file before exiting (so a remote tracer can pull everything first). With
 * BENCH_DEPTH=N in its environment each call of small() is made N unhooked frames down (returns
 * above a hooked call: see bench_trace.py --depth-only). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

volatile long sink;
static long calls;
static int depth;

__attribute__((noinline)) long small(long x)
{
  sink += x;
  return x ^ 1;
}

__attribute__((noinline)) static long down(long x, int d)
{
  long r = d > 0 ? down(x, d - 1) : small(x);
  sink += r;
  return r;
}

static void *loop(void *arg)
{
  (void) arg;
  for (long i = 0; i < calls; i++)
    if (depth > 0)
      down(i, depth);
    else
      small(i);
  return NULL;
}

static double now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
  calls = argc > 1 ? atol(argv[1]) : 10000000;
  long threads = argc > 2 ? atol(argv[2]) : 1;
  depth = getenv("BENCH_DEPTH") != NULL ? atoi(getenv("BENCH_DEPTH")) : 0;
  pthread_t t[64];
  if (argc > 3)
  {
    printf("waiting for %s\n", argv[3]);  /* running main(): safe to inject into */
    fflush(stdout);
    while (access(argv[3], F_OK) != 0)
      usleep(10 * 1000);
  }
  double t0 = now();
  for (long i = 0; i < threads; i++)
    pthread_create(&t[i], NULL, loop, NULL);
  for (long i = 0; i < threads; i++)
    pthread_join(t[i], NULL);
  double dt = now() - t0;
  printf("BENCH calls=%ld threads=%ld seconds=%.6f rate=%.1f\n", calls * threads, threads, dt,
         calls * threads / dt);
  fflush(stdout);
  if (argc > 4)
    while (access(argv[4], F_OK) != 0)
      usleep(10 * 1000);
  return 0;
}
