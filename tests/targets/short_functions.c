/* Functions shorter than the 5-byte jump an x86_64 hook writes, laid out as real code has
 * them (x86_64: in assembly, so the layout is exact; elsewhere in C):
 *   pad_host   xor eax,eax; ret (3 bytes), then 13 bytes of alignment padding: the jump
 *              fits over the padding after it
 *   packed     lea eax,[rdi+rsi]; ret (4 bytes), with packed_next right after it: no room
 *              after it, only a 2-byte short jump to a jump put in padding nearby
 *   packed_next lea eax,[rdi+rdi]; ret (4 bytes), then padding
 * main calls each N times (argv[1]) with arguments i and 1000 + i, then work() once. */
#include <stdio.h>
#include <stdlib.h>

#if defined(__x86_64__)
__asm__ (
    ".text\n"
    ".p2align 4\n"
    ".globl pad_host\n.type pad_host, @function\n"
    "pad_host:\n  xorl %eax, %eax\n  ret\n.size pad_host, .-pad_host\n"
    ".p2align 4, 0x90\n"
    ".globl packed\n.type packed, @function\n"
    "packed:\n  leal (%rdi,%rsi), %eax\n  ret\n.size packed, .-packed\n"
    ".globl packed_next\n.type packed_next, @function\n"
    "packed_next:\n  leal (%rdi,%rdi), %eax\n  ret\n.size packed_next, .-packed_next\n"
    ".p2align 4\n");
int pad_host (void);
int packed (int a, int b);
int packed_next (int a);
#else
/* noipa: without it gcc sees pad_host() is constant and calls it once, out of the loop */
__attribute__((noipa)) int pad_host (void) { return 0; }
__attribute__((noipa)) int packed (int a, int b) { return a + b; }
__attribute__((noipa)) int packed_next (int a) { return a + a; }
#endif

volatile long sink;

__attribute__((noinline)) long work (long x)
{
  sink += x;
  return x * 2;
}

int main (int argc, char **argv)
{
  long n = argc > 1 ? atol (argv[1]) : 10;
  for (long i = 0; i < n; i++)
    sink += pad_host () + packed ((int) i, 1000 + (int) i) + packed_next ((int) i);
  printf ("sum %ld\n", (long) sink + work (1));
  return 0;
}
