/* Calls work() CALLS (argv[2]) times in a burst, BURSTS (argv[1]) times, sleeping PAUSE_MS
 * (argv[3]) between bursts: each burst overfills a small ring and each pause lets the tracer
 * empty it, however loaded the machine is. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

volatile long sink;

__attribute__((noinline)) long work(long x)
{
  sink += x;
  return x * 2;
}

int main(int argc, char **argv)
{
  long bursts = argc > 1 ? atol(argv[1]) : 10;
  long calls = argc > 2 ? atol(argv[2]) : 1000;
  long pause_ms = argc > 3 ? atol(argv[3]) : 5;
  for (long b = 0; b < bursts; b++) {
    for (long i = 0; i < calls; i++)
      work(i);
    usleep(pause_ms * 1000);
  }
  printf("done %ld\n", sink);
  fflush(stdout);
  return 0;
}
