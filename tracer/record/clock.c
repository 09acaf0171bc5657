/*
 * The drain's conversion of raw ticks to ns (clock.py, TickClock.convert), in one pass over
 * the events where they lie (the shared ring: a timestamp every `stride` bytes), here in C
 * because numpy takes about ten passes and 3.2-3.4 ns an event for it (this loop about 1.1),
 * holding the interpreter's lock meanwhile (ctypes lets go of it for this call). Compiled on
 * first use (tracer/native.py); without a compiler clock.py does the same with numpy. Both
 * are checked against TickClock.ns_at, one tick at a time.
 *
 * Segment i covers ticks [starts[i], starts[i + 1]): ns = ns[i] + round((t - starts[i]) *
 * mults[i] / 2^32). Ticks before the first segment extend it backwards. The product is
 * taken in 128 bits: exact however far a tick lies from its segment's start.
 */
#include <stdint.h>

/* Rewrites n timestamps, `stride` bytes apart from `at`, as ns; returns the largest tick. */
uint64_t
ada_convert_ticks (uint8_t * at, int64_t stride, int64_t n, const int64_t * starts,
                   const int64_t * ns, const int64_t * mults, int64_t segments)
{
  /* The newest segment, where nearly every tick falls, held in registers: the stores
   * through `at` could alias the arrays as far as the compiler knows. */
  const int64_t last = starts[segments - 1], last_ns = ns[segments - 1],
      last_mult = mults[segments - 1];
  uint64_t hi = 0;
  int64_t k;

  for (k = 0; k < n; k++, at += stride)
  {
    uint64_t tick;
    int64_t t, start, base, mult;

    __builtin_memcpy (&tick, at, sizeof tick);
    if (tick > hi)
      hi = tick;
    t = (int64_t) tick;
    start = last;
    base = last_ns;
    mult = last_mult;
    if (t < last)
    {
      int64_t lo = 0, top = segments - 1;  /* the last start <= t, else segment 0 */
      while (lo < top)
      {
        int64_t mid = (lo + top + 1) / 2;
        if (starts[mid] <= t)
          lo = mid;
        else
          top = mid - 1;
      }
      start = starts[lo];
      base = ns[lo];
      mult = mults[lo];
    }
    tick = (uint64_t) (base + (int64_t) (((__int128) (t - start) * mult + ((__int128) 1 << 31)) >> 32));
    __builtin_memcpy (at, &tick, sizeof tick);
  }
  return hi;
}
