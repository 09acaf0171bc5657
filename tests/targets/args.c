/* Functions whose arguments and return values ada decodes from DWARF: integers of every size
 * and sign, char, bool, enums, pointers, strings, a struct by pointer, a struct returned in
 * memory, more than six arguments, and (at -O2) a constant-propagated clone. Built by the
 * tests at -O0 and -O2 with -g, and without -g. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

enum color { RED, GREEN, BLUE = 7 };
struct point { long x, y; };
struct big { long a, b, c, d; };

volatile long sink;

__attribute__((noinline)) int ints(int8_t a, uint8_t b, int16_t c, uint16_t d, int32_t e,
                                   uint32_t f)
{
  sink += a + b + c + d + e + f;
  return a + e;
}

__attribute__((noinline)) int64_t wide(int64_t a, uint64_t b)
{
  sink += a;
  return a - (int64_t) (b & 1);
}

__attribute__((noinline)) char shout(char c, bool upper)
{
  sink += c;
  return upper ? (char) (c - 32) : c;
}

__attribute__((noinline)) enum color pick(enum color c)
{
  sink += c;
  return c == RED ? BLUE : RED;
}

__attribute__((noinline)) size_t measure(const char *s, void *p)
{
  sink += (long) p;
  return strlen(s);
}

__attribute__((noinline)) long norm(const struct point *pt)
{
  return pt->x * pt->x + pt->y * pt->y;
}

__attribute__((noinline)) struct big make_big(long seed)
{
  struct big b = { seed, seed + 1, seed + 2, seed + 3 };
  sink += seed;
  return b;
}

__attribute__((noinline)) long eight(long a, long b, long c, long d, long e, long f, long g,
                                     long h)
{
  return a + b + c + d + e + f + g + h;
}

/* C strings: captured at the call (up to 64 bytes); NULL and a bad pointer are left as
 * they are, without harm to the program. */
__attribute__((noinline)) int keep(const char *label, const char *s)
{
  sink += (long) s;
  return label[0];
}

/* At -O2 gcc clones this into scale.constprop.0 (factor is always 3): the clone must still
 * find its parameters' names and types through DW_AT_abstract_origin. */
static __attribute__((noinline)) long scale(long value, long factor)
{
  sink += value;
  return value * factor;
}

/* At -O2 inlined into main where called directly, and also emitted out of line for the
 * pointer: that copy finds its parameter through DW_AT_abstract_origin too. */
static long twice(long x)
{
  return 2 * x;
}
long (*volatile twice_ptr)(long) = twice;

int main(int argc, char **argv)
{
  struct point pt = { 3, 4 };
  (void) argv;
  sink += ints(-5, 200, -300, 60000, -70000, 4000000000u);
  sink += wide(-1234567890123, 18000000000000000000ull);
  sink += shout('a', true);
  sink += pick(RED) + pick(BLUE);
  sink += measure("hello", &pt);
  sink += norm(&pt);
  sink += make_big(10).d;
  sink += eight(1, 2, 3, 4, 5, 6, 7, 8);
  sink += scale(argc + 10, 3) + scale(argc + 20, 3);
  sink += keep("long", "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-+=[]{}");
  sink += keep("null", NULL) + keep("bad", (const char *) 16);
  sink += twice(argc) + twice_ptr(5);
  printf("%ld\n", (long) sink);
  return 0;
}
