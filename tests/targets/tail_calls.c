/* Tail calls as gcc -O2 emits them (tests/test_tail_calls.py builds this with -O2 and checks
 * with objdump that each "jmp" below is one), for call-depth checks. argv[1] picks a case,
 * argv[2] how many times main runs it:
 *   tail     top -> mid -(jmp)-> leaf                        a tail call into a hooked function
 *   relay    top_relay -> via_relay -(jmp)-> relay -(jmp)-> leaf
 *                                                            through a function not hooked
 *   chain    top_chain -> chain_a -(jmp)-> chain_b -(jmp)-> chain_c
 *   longjmp  outer -> jmid -(jmp)-> jleaf, which longjmps back into outer; outer calls jmid
 *            again from the same stack slot, N times, then returns (the last two calls left
 *            open until then)
 *   rec      rec(3) -> hop(3) -(jmp)-> rec(2) -> hop(2) -(jmp)-> rec(1) -> ... rec(0):
 *            recursion through a tail call (argv[3]: from rec(argv[3]) instead of rec(3))
 *   pingpong top_ping -> ping(4) -(jmp)-> pong(3) -(jmp)-> ping(2) -(jmp)-> pong(1)
 *            -(jmp)-> ping(0): mutual recursion by tail calls only
 * Every function is noipa (not inlined, not cloned, not specialised: each keeps its own
 * symbol and is reached only through it) and starts with a store to `sink`, so the inline
 * engine can move its first instructions (no call among them). */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define F __attribute__((noipa))

volatile long sink;
static jmp_buf env;

F long leaf(long x) { sink ^= x; return x + 3; }
F long mid(long x) { sink += x; return leaf(x * 2); }                  /* jmp leaf */
F long top(long x) { sink += 1; return mid(x) + 1; }                   /* a real call */

F long relay(long x) { sink -= x; return leaf(x + 5); }                /* jmp leaf */
F long via_relay(long x) { sink += x; return relay(x * 3); }           /* jmp relay */
F long top_relay(long x) { sink += 1; return via_relay(x) + 1; }

F long chain_c(long x) { sink ^= x; return x - 1; }
F long chain_b(long x) { sink += x; return chain_c(x + 2); }           /* jmp chain_c */
F long chain_a(long x) { sink += x; return chain_b(x * 2); }           /* jmp chain_b */
F long top_chain(long x) { sink += 1; return chain_a(x) + 1; }

F long jleaf(long x) { sink ^= x; longjmp(env, 1); }
F long jmid(long x) { sink += x; return jleaf(x + 1); }                /* jmp jleaf */
F long outer(long n)
{
  volatile long i;
  sink += 1;
  for (i = 0; i < n; i++)
    if (setjmp(env) == 0)
      jmid(i);                  /* from the same stack slot each time */
  return n;
}

F long hop(long n);
F long rec(long n)
{
  sink += n;
  if (n <= 0)
    return 0;
  return hop(n) + 1;            /* a real call */
}
F long hop(long n) { sink ^= n; return rec(n - 1); }                   /* jmp rec */

F long pong(long n);
F long ping(long n)
{
  sink += n;
  if (n <= 0)
    return 0;
  return pong(n - 1);           /* jmp pong */
}
F long pong(long n) { sink ^= n; return ping(n - 1); }                 /* jmp ping */
F long top_ping(long n) { sink += 1; return ping(n) + 1; }

int main(int argc, char **argv)
{
  const char *how = argc > 1 ? argv[1] : "tail";
  long n = argc > 2 ? atol(argv[2]) : 3, sum = 0;
  long depth = argc > 3 ? atol(argv[3]) : 3;

  if (strcmp(how, "longjmp") == 0)
    sum = outer(n);
  for (long i = 0; i < n; i++)
  {
    if (strcmp(how, "tail") == 0)
      sum += top(i);
    else if (strcmp(how, "relay") == 0)
      sum += top_relay(i);
    else if (strcmp(how, "chain") == 0)
      sum += top_chain(i);
    else if (strcmp(how, "rec") == 0)
      sum += rec(depth);
    else if (strcmp(how, "pingpong") == 0)
      sum += top_ping(4);
  }
  printf("%s %ld sum %ld\n", how, n, sum);
  return 0;
}
