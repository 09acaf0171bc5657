/* Brackets each of N calls of work() (argv[1]) with CLOCK_BOOTTIME reads, GAP_US apart
 * (argv[2]), and prints "before after" per call: the recorded timestamps must fall inside. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

volatile long sink;

__attribute__((noinline)) long work(long x)
{
  sink += x;
  return x + 1;
}

static unsigned long long boottime_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return (unsigned long long) ts.tv_sec * 1000000000ULL + (unsigned long long) ts.tv_nsec;
}

int main(int argc, char **argv)
{
  long n = argc > 1 ? atol(argv[1]) : 100;
  long gap_us = argc > 2 ? atol(argv[2]) : 10000;
  unsigned long long *marks = calloc(2 * n, sizeof *marks);
  for (long i = 0; i < n; i++) {
    marks[2 * i] = boottime_ns();
    work(i);
    marks[2 * i + 1] = boottime_ns();
    usleep(gap_us);
  }
  for (long i = 0; i < n; i++)
    printf("%llu %llu\n", marks[2 * i], marks[2 * i + 1]);
  return 0;
}
