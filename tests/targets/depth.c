/* Recursion and a function left by longjmp, for call-depth checks.
 * fact(5) recurses (depths 0..5); jumper() never returns (longjmp back to main);
 * after() is then called 3 times and must be at depth 0 each time. */
#include <setjmp.h>
#include <stdio.h>

static jmp_buf env;
volatile long sink;

__attribute__((noinline)) long fact(long n)
{
  sink++;
  return n <= 1 ? 1 : n * fact(n - 1);
}

__attribute__((noinline)) void jumper(int code)
{
  sink++;
  longjmp(env, code);
}

__attribute__((noinline)) long after(long x)
{
  sink += x;
  return x + 1;
}

int main(void)
{
  printf("fact %ld\n", fact(5));
  if (setjmp(env) == 0)
    jumper(1);
  for (int i = 0; i < 3; i++)
    after(i);
  printf("done\n");
  return 0;
}
