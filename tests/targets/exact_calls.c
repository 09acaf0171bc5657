/* Calls work() exactly N times (argv[1]) on one thread, or on T threads (argv[2]) each its own
 * count N + thread index, then exits. Used to check that every call is recorded. With a third
 * argument GATE, it first waits until the file GATE exists (so a tracer can attach first); with
 * a fourth, EXIT_GATE, it waits for that file before exiting. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

volatile long sink;

__attribute__((noinline)) long work(long x)
{
  sink += x;
  return x * 2;
}

static long per_thread_base;

static void *run(void *arg)
{
  long n = per_thread_base + (long) arg;
  for (long i = 0; i < n; i++)
    work(i);
  return NULL;
}

int main(int argc, char **argv)
{
  long n = argc > 1 ? atol(argv[1]) : 1000;
  long threads = argc > 2 ? atol(argv[2]) : 0;
  if (threads > 1024)
    threads = 1024;
  per_thread_base = n;
  if (argc > 3) {
    printf("waiting for %s\n", argv[3]);
    fflush(stdout);
    while (access(argv[3], F_OK) != 0)
      usleep(10 * 1000);
  }
  if (threads == 0) {
    run(0);
  } else {
    pthread_t t[1024];
    for (long i = 0; i < threads; i++)
      pthread_create(&t[i], NULL, run, (void *) i);
    for (long i = 0; i < threads; i++)
      pthread_join(t[i], NULL);
  }
  printf("done %ld\n", sink);
  fflush(stdout);
  if (argc > 4)
    while (access(argv[4], F_OK) != 0)
      usleep(10 * 1000);
  return 0;
}
