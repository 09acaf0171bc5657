/* Runs until killed: calls work() in a loop and prints "tick N" every 20 ms, so a test can see
 * it keeps running after ada detaches. With argv[1] = "crash-after" N, it calls work() N times
 * and then dies of SIGSEGV. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

volatile long sink;

__attribute__((noinline)) long work(long x)
{
  sink += x;
  return x;
}

int main(int argc, char **argv)
{
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc > 2 && strcmp(argv[1], "crash-after") == 0) {
    long n = atol(argv[2]);
    for (long i = 0; i < n; i++)
      work(i);
    raise(SIGSEGV);
    return 1;
  }
  for (long tick = 0;; tick++) {
    for (int i = 0; i < 1000; i++)
      work(i);
    printf("tick %ld\n", tick);
    usleep(20 * 1000);
  }
}
