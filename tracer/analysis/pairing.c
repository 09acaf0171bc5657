/*
 * The pairing of one chunk of a thread's events (pairing.py, pair()), in one pass with a
 * stack: what the numpy code there works out on whole columns, the same, here in C because
 * numpy's passes over a chunk cost about 40 ns an event and hold the interpreter's lock for
 * much of it (ctypes lets go of it for this call: chunks are paired on every core).
 * Compiled on first use with the system's C compiler (pairing.py, _kernel()); without one,
 * the numpy code does the work. Both are checked against the same oracle.
 *
 * Events are a chunk's CALLs (kind 1) and closes (RETURN 2, EXCEPTION 3). A close ends the
 * innermost CALL of the chunk still open; a close with none open ends a call opened before
 * the chunk (a "leading" close). Levels are counted from 0 at the chunk's start (negative
 * below it). Everything by the order of the events, never the recorded depth.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { CALL = 1, RETURN = 2, EXCEPTION = 3 };

/* Numbers for the chunk's functions, in the order they are first met (open addressing,
 * the table doubled as it fills), and each one's count of calls open. */
typedef struct
{
  uint64_t * keys;
  int32_t * values;
  uint64_t mask;
  int32_t * open;  /* by number: calls of the function open */
  int64_t capacity;  /* of `open` */
} Numbers;

static int
numbers_grow (Numbers * t, uint64_t size)
{
  uint64_t * keys = malloc (size * sizeof (uint64_t));
  int32_t * values = malloc (size * sizeof (int32_t));
  uint64_t i;
  if (keys == NULL || values == NULL)
  {
    free (keys);
    free (values);
    return 0;
  }
  memset (values, 0xff, size * sizeof (int32_t));  /* -1: free */
  for (i = 0; t->keys != NULL && i <= t->mask; i++)
  {
    uint64_t h;
    if (t->values[i] < 0)
      continue;
    for (h = (t->keys[i] * 0x9E3779B97F4A7C15ULL) >> 17; values[h & (size - 1)] >= 0; h++)
      ;
    keys[h & (size - 1)] = t->keys[i];
    values[h & (size - 1)] = t->values[i];
  }
  free (t->keys);
  free (t->values);
  t->keys = keys;
  t->values = values;
  t->mask = size - 1;
  return 1;
}

static int32_t
numbers_get (Numbers * t, uint64_t key, uint64_t * functions, int64_t * nf)
{
  uint64_t h = (key * 0x9E3779B97F4A7C15ULL) >> 17;
  for (;; h++)
  {
    uint64_t i = h & t->mask;
    if (t->values[i] < 0)
    {
      if ((uint64_t) (*nf + 1) * 2 > t->mask + 1)  /* half full: double, then look again */
      {
        if (!numbers_grow (t, (t->mask + 1) * 2))
          return -1;
        return numbers_get (t, key, functions, nf);
      }
      if (*nf >= t->capacity)
      {
        int32_t * open = realloc (t->open, (size_t) (t->capacity * 2) * sizeof (int32_t));
        if (open == NULL)
          return -1;
        memset (open + t->capacity, 0, (size_t) t->capacity * sizeof (int32_t));
        t->open = open;
        t->capacity *= 2;
      }
      t->keys[i] = key;
      t->values[i] = (int32_t) *nf;
      functions[*nf] = key;
      return (int32_t) (*nf)++;
    }
    if (t->keys[i] == key)
      return t->values[i];
  }
}

/* The chunk's call paths: (the path of the call it is in, or the slot of the call open
 * before the chunk it is in, < 0; its function) -> a number, in the order first met. */
typedef struct
{
  int64_t * ups;
  uint64_t * fids;
  int32_t * values;
  uint64_t mask;
} Paths;

static uint64_t
paths_hash (int64_t up, uint64_t fid)
{
  return (((uint64_t) up * 0x9E3779B97F4A7C15ULL) ^ (fid * 0xC2B2AE3D27D4EB4FULL)) >> 13;
}

static int
paths_grow (Paths * t, uint64_t size)
{
  int64_t * ups = malloc (size * sizeof (int64_t));
  uint64_t * fids = malloc (size * sizeof (uint64_t));
  int32_t * values = malloc (size * sizeof (int32_t));
  uint64_t i;
  if (ups == NULL || fids == NULL || values == NULL)
  {
    free (ups);
    free (fids);
    free (values);
    return 0;
  }
  memset (values, 0xff, size * sizeof (int32_t));
  for (i = 0; t->values != NULL && i <= t->mask; i++)
  {
    uint64_t h;
    if (t->values[i] < 0)
      continue;
    for (h = paths_hash (t->ups[i], t->fids[i]); values[h & (size - 1)] >= 0; h++)
      ;
    ups[h & (size - 1)] = t->ups[i];
    fids[h & (size - 1)] = t->fids[i];
    values[h & (size - 1)] = t->values[i];
  }
  free (t->ups);
  free (t->fids);
  free (t->values);
  t->ups = ups;
  t->fids = fids;
  t->values = values;
  t->mask = size - 1;
  return 1;
}

static int32_t
paths_get (Paths * t, int64_t up, uint64_t fid, int64_t * path_up, uint64_t * path_fid,
    int64_t * np)
{
  uint64_t h = paths_hash (up, fid);
  for (;; h++)
  {
    uint64_t i = h & t->mask;
    if (t->values[i] < 0)
    {
      if ((uint64_t) (*np + 1) * 2 > t->mask + 1)
      {
        if (!paths_grow (t, (t->mask + 1) * 2))
          return -1;
        return paths_get (t, up, fid, path_up, path_fid, np);
      }
      t->ups[i] = up;
      t->fids[i] = fid;
      t->values[i] = (int32_t) *np;
      path_up[*np] = up;
      path_fid[*np] = fid;
      return (int32_t) (*np)++;
    }
    if (t->ups[i] == up && t->fids[i] == fid)
      return t->values[i];
  }
}

/*
 * n events: kind, fid, ts, strides[0..2] bytes apart (the mapped records, or columns).
 * Events of another kind neither open nor close a call (is_call 0, level unchanged).
 * hidden_fids (sorted, nh of them, or NULL): calls of
 * these functions have their time counted as their parent's own, not its children's.
 * want (bits): 1 find calls made inside an open call of the same function of the chunk
 * (`nested`, with the functions numbered); 2 also report's figures (`stats`); 4 number the
 * chunk's call paths (`path`, per call; `path_up` and `path_fid`, per path).
 *
 * Out, per event: is_call, level (open calls after it), slot (the stack position its call
 * holds).
 * Out, per CALL (k of them, in order): calls (its position), fids, starts, slots, end (its
 * close's position, or -1), parent (its parent's CALL position; < 0: the slot of the call
 * open before the chunk it is in), prank (its parent's rank among the CALLs, or -1), before
 * (the lowest level before it), duration (-1 while open), children (the time of its shown
 * children that end in the chunk), shown, nested, fnum (its function's number).
 * Out: closed and end_at (the ranks of the calls that end in the chunk, in order, and their
 * ends' positions), leading (the positions of the leading closes, in order), outer_children
 * (by -slot - 1 of the calls open before the chunk: the time of their shown children that
 * end in the chunk), stack (the ranks of the calls still open at the end, in order; scratch
 * of n), functions (by number), stats (5 x k: calls, total of those not inside an open call
 * of the same function of the chunk, self, min and max duration, by function number: `ada
 * report`'s figures of the calls that begin and end in the chunk). result: k, leading
 * closes, calls still open, the lowest level, pairs of different functions, calls ended,
 * functions, events of other kinds; -1 in result[0] when memory ran out.
 */
#define KIND(i) (*(const uint32_t *) ((const char *) kind + (i) * strides[0]))
#define FID(i) (*(const uint64_t *) ((const char *) fid + (i) * strides[1]))
#define TS(i) (*(const uint64_t *) ((const char *) ts + (i) * strides[2]))

void
ada_pair (int64_t n, const uint32_t * kind, const uint64_t * fid, const uint64_t * ts,
    const int64_t * strides, const uint64_t * hidden_fids, int64_t nh, int64_t want,
    uint8_t * is_call, int32_t * level_out, int32_t * slot_out,
    int64_t * calls, uint64_t * fids, uint64_t * starts, int64_t * slots, int64_t * end,
    int64_t * parent, int64_t * prank, int64_t * before, int64_t * duration,
    int64_t * children, uint8_t * shown, uint8_t * nested, int32_t * fnum,
    int64_t * closed, int64_t * end_at, int64_t * leading, int64_t * outer_children,
    int64_t * stack, uint64_t * functions, int64_t * stats, int32_t * path, int64_t * path_up,
    uint64_t * path_fid, int64_t * result)
{
  int64_t k = 0, n_lead = 0, sp = 0, level = 0, lowest = 0, mismatched = 0, nf = 0, i;
  int64_t n_closed = 0, other = 0;
  Numbers numbers = { NULL, NULL, 0, NULL, 0 };
  Paths paths = { NULL, NULL, NULL, 0 };
  int64_t n_paths = 0;
  int64_t *s_calls = NULL, *s_total = NULL, *s_self = NULL, *s_min = NULL, *s_max = NULL;

  result[0] = -1;
  if (want & 4 && !paths_grow (&paths, 1024))
    goto out;
  if (want & 3)
  {
    numbers.capacity = 256;
    numbers.open = calloc ((size_t) numbers.capacity, sizeof (int32_t));
    if (numbers.open == NULL || !numbers_grow (&numbers, 1024))
      goto out;
  }
  outer_children[0] = 0;
  for (i = 0; i < n; i++)
  {
    uint32_t what = KIND (i);
    is_call[i] = what == CALL;
    if (what == CALL)
    {
      int64_t r = k++;
      uint64_t f = FID (i);
      int64_t lo = 0, hi = nh;
      calls[r] = i;
      fids[r] = f;
      starts[r] = TS (i);
      slots[r] = level;
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
      while (lo < hi)  /* a hidden function's? (a bisection of a few names) */
      {
        int64_t mid = (lo + hi) / 2;
        if (hidden_fids[mid] < f)
          lo = mid + 1;
        else
          hi = mid;
      }
      shown[r] = !(lo < nh && hidden_fids[lo] == f);
      if (want & 4)
      {
        int32_t p = paths_get (&paths, sp > 0 ? (int64_t) path[stack[sp - 1]] : level - 1, f,
            path_up, path_fid, &n_paths);
        if (p < 0)
          goto out;
        path[r] = p;
      }
      if (want & 3)
      {
        int32_t number = numbers_get (&numbers, f, functions, &nf);
        if (number < 0)
          goto out;
        fnum[r] = number;
        nested[r] = numbers.open[number] > 0;
        numbers.open[number]++;
      }
      else
      {
        nested[r] = 0;
      }
      stack[sp++] = r;
      level++;
    }
    else if (what != RETURN && what != EXCEPTION)
    {
      other++;  /* neither opens nor closes a call */
      slot_out[i] = (int32_t) level;
    }
    else
    {
      level--;
      slot_out[i] = (int32_t) level;
      if (sp > 0)
      {
        int64_t r = stack[--sp];
        int64_t d = (int64_t) (TS (i) - starts[r]);
        end[r] = i;
        duration[r] = d;
        if (FID (i) != fids[r])
          mismatched++;
        if (want & 3)
          numbers.open[fnum[r]]--;
        if (!shown[r])
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
  for (i = 0; i < k; i++)  /* the calls that ended, in order, and report's figures */
  {
    if (end[i] < 0)
      continue;
    closed[n_closed] = i;
    end_at[n_closed++] = end[i];
  }
  if (want & 2)
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
    for (i = 0; i < n_closed; i++)
    {
      int64_t r = closed[i], d = duration[r], own = d - children[r];
      int32_t f = fnum[r];
      s_calls[f]++;
      if (!nested[r])
        s_total[f] += d;
      s_self[f] += own > 0 ? own : 0;
      if (d < s_min[f])
        s_min[f] = d;
      if (d > s_max[f])
        s_max[f] = d;
    }
  }
  result[0] = k;
  result[1] = n_lead;
  result[2] = sp;
  result[3] = lowest;
  result[4] = mismatched;
  result[5] = n_closed;
  result[6] = nf;
  result[7] = other;
  result[8] = n_paths;
out:
  free (paths.ups);
  free (paths.fids);
  free (paths.values);
  free (numbers.open);
  free (numbers.keys);
  free (numbers.values);
}

/*
 * The closes that take a thread's level below the lowest it has been, starting from 0 (the
 * calls its recording began inside, calls.outer_calls): their positions into `lead`, their
 * count into result[0], the level after the last event into result[1]. One strided pass
 * over the kinds; events of other kinds change nothing.
 */
void
ada_scan (int64_t n, const uint32_t * kind, int64_t stride, int64_t * lead, int64_t * result)
{
  int64_t level = 0, low = 0, k = 0, i;
  for (i = 0; i < n; i++)
  {
    uint32_t what = *(const uint32_t *) ((const char *) kind + i * stride);
    if (what == CALL)
      level++;
    else if (what == RETURN || what == EXCEPTION)
    {
      if (--level < low)
      {
        low = level;
        lead[k++] = i;
      }
    }
  }
  result[0] = k;
  result[1] = level;
}
