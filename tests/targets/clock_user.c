/* Calls clock_gettime exactly N times (argv[1]) on its main thread, for tracing a
 * function the tracer's own hot path could use. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv)
{
  long n = argc > 1 ? atol(argv[1]) : 1000;
  struct timespec ts;
  long sum = 0;
  for (long i = 0; i < n; i++) {
    clock_gettime(CLOCK_MONOTONIC, &ts);
    sum += ts.tv_nsec & 1;
  }
  printf("done %ld\n", sum);
  return 0;
}
