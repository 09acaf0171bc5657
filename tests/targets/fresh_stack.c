/* Runs probe() on a fresh 16 KiB stack (makecontext) whose top is followed by an
 * inaccessible page, so a stack window of 256 bytes from sp would run off the end. */
#include <stdio.h>
#include <sys/mman.h>
#include <ucontext.h>

static ucontext_t main_ctx, fresh_ctx;
volatile long sink;

__attribute__((noinline)) long probe(long x)
{
  sink += x;
  return x + 1;
}

static void entry(void)
{
  probe(41);
}

int main(void)
{
  const size_t size = 16384, page = 4096;
  char *area = mmap(NULL, size + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (area == MAP_FAILED)
    return 2;
  mprotect(area + size, page, PROT_NONE);  /* nothing readable above the stack's top */
  getcontext(&fresh_ctx);
  fresh_ctx.uc_stack.ss_sp = area;
  fresh_ctx.uc_stack.ss_size = size;
  fresh_ctx.uc_link = &main_ctx;
  makecontext(&fresh_ctx, entry, 0);
  swapcontext(&main_ctx, &fresh_ctx);
  probe(1);  /* and once on the normal stack */
  printf("ok %ld top %p\n", sink, (void *) (area + size));
  return 0;
}
