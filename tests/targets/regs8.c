/* mix8(a..h) called with eight known arguments from call_mix, not from main, so its return
 * address lies inside call_mix. call_mix keeps a frame pointer (it asks for its frame address)
 * and prints it: at mix8's entry fp is still call_mix's, and the frame record there holds
 * call_mix's own return address into main. */
#include <stdio.h>

__attribute__((noinline)) long mix8(long a, long b, long c, long d, long e, long f, long g,
                                    long h)
{
  return a + 2 * b + 3 * c + 4 * d + 5 * e + 6 * f + 7 * g + 8 * h;
}

__attribute__((noinline)) long call_mix(long base)
{
  printf("frame %p\n", __builtin_frame_address(0));
  fflush(stdout);
  return mix8(base + 1, base + 2, base + 3, base + 4, base + 5, base + 6, base + 7, base + 8) + 1;
}

int main(void)
{
  long total = call_mix(0x100) + call_mix(0x200);
  printf("done %ld\n", total);
  return 0;
}
