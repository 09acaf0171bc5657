/* Nested calls on two threads, for the views of the call paths (flame graphs, their callers
 * views): main starts a thread, then both run rounds of N (argv[1], default 20):
 *   outer -> middle -> leaf, outer -> leaf (leaf has two callers), fact(4) (recursion), and
 *   on the second thread only, side -> leaf. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

volatile long sink;

__attribute__((noinline)) long leaf(long x)
{
  for (int i = 0; i < 200; i++)
    sink += x ^ i;
  return sink;
}

__attribute__((noinline)) long middle(long x)
{
  return leaf(x) + leaf(x + 1);
}

__attribute__((noinline)) long outer(long x)
{
  return middle(x) + leaf(x);
}

__attribute__((noinline)) long fact(long n)
{
  sink++;
  return n <= 1 ? 1 : n * fact(n - 1);
}

__attribute__((noinline)) long side(long x)
{
  return leaf(x * 3);
}

static long rounds;

static void *second(void *arg)
{
  (void) arg;
  for (long i = 0; i < rounds; i++)
    sink += outer(i) + fact(4) + side(i);
  return NULL;
}

int main(int argc, char **argv)
{
  rounds = argc > 1 ? atol(argv[1]) : 20;
  pthread_t t;
  pthread_create(&t, NULL, second, NULL);
  for (long i = 0; i < rounds; i++)
    sink += outer(i) + fact(4);
  pthread_join(t, NULL);
  printf("sum %ld\n", (long) sink);
  return 0;
}
