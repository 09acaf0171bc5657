/*
 * The pairing of one chunk of a thread's events (pairing.py, pair()), in one pass with a
 * stack: what the numpy code there works out on whole columns, the same, here in C because
 * numpy's passes over a chunk cost about 40 ns an event and hold the interpreter's lock for
 * much of it. Compiled on first use with the system's C compiler (pairing.py, _kernel());
 * without one, the numpy code does the work. Both are checked against the same oracle.
 *
 * Events are a chunk's CALLs (kind 1) and closes (RETURN 2, EXCEPTION 3). A close ends the
 * innermost CALL of the chunk still open; a close with none open ends a call opened before
 * the chunk (a "leading" close). Levels are counted from 0 at the chunk's start (negative
 * below it). Everything by the order of the events, never the recorded depth.
 */
#include <stdint.h>
#include <string.h>

enum { CALL = 1 };

/*
 * n events: kind, fid, ts (contiguous). dense (per CALL, by its rank among the CALLs: its
 * function's number in 0..nf-1, or NULL): find calls made inside an open call of the same
 * function of the chunk (`nested`); hidden (per CALL, or NULL): calls whose time is not their
 * parent's children's.
 * Out, per event: level (open calls after it), slot (the stack position its call holds).
 * Out, per CALL (k of them, in order): calls (its position), end (its close's, or -1),
 * parent (its parent's CALL position; < 0: the slot of the call open before the chunk it is
 * in), prank (its parent's rank among the CALLs, or -1), before (the lowest level before
 * it), duration (-1 while open), children (the time of its shown children that end in the
 * chunk), nested. Out: leading (the positions of the leading closes, in order),
 * outer_children (by -slot - 1 of the calls open before the chunk: the time of their shown
 * children that end in the chunk), stack (the ranks of the calls still open at the end, in
 * order; scratch of n), count (scratch of nf). result: k, leading closes, calls still open,
 * the lowest level, pairs of different functions.
 * With `stats` (5 x nf, or NULL; needs dense): the figures of the calls that begin and end
 * in the chunk, by function: calls, total (of those not inside an open call of the same
 * function of the chunk), self (duration minus the shown children's), min and max duration
 * (`ada report`'s, before what the calls open before the chunk change).
 */
void
ada_pair (int64_t n, const uint32_t * kind, const uint64_t * fid, const uint64_t * ts,
    const int32_t * dense, int64_t nf, const uint8_t * hidden,
    int32_t * level_out, int32_t * slot_out,
    int64_t * calls, int64_t * end, int64_t * parent, int64_t * prank, int64_t * before,
    int64_t * duration, int64_t * children, uint8_t * nested,
    int64_t * leading, int64_t * outer_children, int64_t * stack, int32_t * count,
    int64_t * stats, int64_t * result)
{
  int64_t k = 0, n_lead = 0, sp = 0, level = 0, lowest = 0, mismatched = 0, i;
  int64_t *s_calls = NULL, *s_total = NULL, *s_self = NULL, *s_min = NULL, *s_max = NULL;

  if (dense != NULL)
    memset (count, 0, (size_t) nf * sizeof (int32_t));
  if (stats != NULL)
  {
    s_calls = stats;
    s_total = stats + nf;
    s_self = stats + 2 * nf;
    s_min = stats + 3 * nf;
    s_max = stats + 4 * nf;
    memset (stats, 0, (size_t) (3 * nf) * sizeof (int64_t));
    for (i = 0; i < nf; i++)
    {
      s_min[i] = INT64_MAX;
      s_max[i] = INT64_MIN;
    }
  }
  outer_children[0] = 0;
  for (i = 0; i < n; i++)
  {
    if (kind[i] == CALL)
    {
      int64_t r = k++;
      calls[r] = i;
      slot_out[i] = (int32_t) level;
      if (sp > 0)
      {
        prank[r] = stack[sp - 1];
        parent[r] = calls[stack[sp - 1]];
      }
      else
      {
        prank[r] = -1;
        parent[r] = level - 1;  /* in the call open before the chunk one slot down */
      }
      before[r] = lowest;
      end[r] = -1;
      duration[r] = -1;
      children[r] = 0;
      if (dense != NULL)
      {
        nested[r] = count[dense[r]] > 0;
        count[dense[r]]++;
      }
      else
      {
        nested[r] = 0;
      }
      stack[sp++] = r;
      level++;
    }
    else
    {
      level--;
      slot_out[i] = (int32_t) level;
      if (sp > 0)
      {
        int64_t r = stack[--sp], at = calls[r];
        int64_t d = (int64_t) (ts[i] - ts[at]);
        end[r] = i;
        duration[r] = d;
        if (fid[i] != fid[at])
          mismatched++;
        if (dense != NULL)
          count[dense[r]]--;
        if (stats != NULL)
        {
          int32_t f = dense[r];
          int64_t own = d - children[r];
          s_calls[f]++;
          if (!nested[r])
            s_total[f] += d;
          s_self[f] += own > 0 ? own : 0;
          if (d < s_min[f])
            s_min[f] = d;
          if (d > s_max[f])
            s_max[f] = d;
        }
        if (hidden != NULL && hidden[r])
          d = 0;  /* its time is its caller's own */
        if (sp > 0)
          children[stack[sp - 1]] += d;
        else
          outer_children[-level] += d;  /* its parent: open before the chunk, slot level - 1 */
      }
      else
      {
        leading[n_lead++] = i;
        lowest = level;
        outer_children[-lowest] = 0;  /* zeroed as it comes into use */
      }
    }
    level_out[i] = (int32_t) level;
  }
  result[0] = k;
  result[1] = n_lead;
  result[2] = sp;
  result[3] = lowest;
  result[4] = mismatched;
}
