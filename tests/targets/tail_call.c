/* tail_a() ends in a jump to tail_b() (a tail call, written in assembly so that no compiler
 * setting changes it): tail_b returns straight to tail_a's caller. Calls tail_a N times. */
#include <stdio.h>
#include <stdlib.h>

long tail_a(long x);

__attribute__((noinline)) long tail_b(long x)
{
  return x * 3 + 1;
}

#if defined(__x86_64__)
__asm__(".text\n.globl tail_a\n.type tail_a, @function\ntail_a:\n"
        "  addq $1, %rdi\n  jmp tail_b\n  .size tail_a, .-tail_a\n");
#elif defined(__aarch64__)
__asm__(".text\n.globl tail_a\n.type tail_a, %function\ntail_a:\n"
        "  add x0, x0, #1\n  nop\n  b tail_b\n  .size tail_a, .-tail_a\n");
#endif

int main(int argc, char **argv)
{
  long n = argc > 1 ? atol(argv[1]) : 1000, sum = 0;
  for (long i = 0; i < n; i++)
    sum += tail_a(i);
  printf("sum %ld\n", sum);
  return 0;
}
