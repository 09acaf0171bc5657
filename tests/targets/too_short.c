/* tiny() is shorter than the jump Frida's Interceptor would write over its start, so it cannot
 * be hooked; work() can. main calls each N times (argv[1]). */
#include <stdlib.h>

volatile long sink;

__attribute__((noinline)) int tiny(int x)
{
  return x * 2;
}

__attribute__((noinline)) long work(long x)
{
  sink += x;
  return x * 2;
}

int main(int argc, char **argv)
{
  long n = argc > 1 ? atol(argv[1]) : 10;
  for (long i = 0; i < n; i++)
    sink += tiny((int) i) + work(i);
  return 0;
}
