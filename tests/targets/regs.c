/* Calls add(a, b) with known arguments, printing the address of a local of main so tests
 * can check the recorded sp lies on this thread's stack. */
#include <stdio.h>

__attribute__((noinline)) long add(long a, long b)
{
  return a + b;
}

int main(void)
{
  volatile long here = 0;
  printf("local %p\n", (void *) &here);
  fflush(stdout);
  here = add(3, 4) + add(100, 23) + add(-5, 1000000007);
  printf("done %ld\n", (long) here);
  return 0;
}
