/* outer() calls sleeper() three times; sleeper() sleeps 20 ms: durations known by
 * construction (at least), whatever the machine's load. */
#include <time.h>

__attribute__((noinline)) void sleeper(void)
{
  struct timespec ts = { 0, 20 * 1000 * 1000 };
  while (nanosleep(&ts, &ts) != 0)
    ;
}

__attribute__((noinline)) void outer(void)
{
  for (int i = 0; i < 3; i++)
    sleeper();
}

int main(void)
{
  outer();
  return 0;
}
