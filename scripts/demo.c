/* The README's demo target: a small program with a call tree worth looking at. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) int parse_digit(char c) { return c - '0'; }

__attribute__((noinline)) int checksum(const char *s)
{
  int sum = 0;
  for (; *s; s++)
    sum += parse_digit(*s);
  return sum;
}

__attribute__((noinline)) long fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

int main(void)
{
  for (int i = 0; i < 5; i++)
    printf("checksum=%d fib=%ld\n", checksum("20261121"), fib(8 + i));
  return 0;
}
