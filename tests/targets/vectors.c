/* Vector registers across hooked calls (x86_64). The SysV ABI lets a callee change
 * xmm0-15, but plain() does not (it is built to use none), so its callers may count on them
 * (gcc's -fipa-ra does just that): a hook must leave all 16 as they were, at the call and at
 * the return. kept() loads a pattern into xmm0-15, calls plain() and stores what xmm0-15 hold
 * after; mix() takes eight doubles (xmm0-7) and returns one (xmm0).
 * With AVX, the same for the full 256 bits of ymm0-15 (kept_ymm()), and wide() takes two
 * 256-bit vectors (ymm0, ymm1) and returns one (ymm0): libc's AVX code that a hook may run
 * (memcpy) ends with vzeroupper, which clears the upper halves of every ymm register.
 * argv[1] = N: main, then two new threads (their first hooked call registers them with ada),
 * each make N calls of each; prints "vectors <bad> mix <bad> ymm <bad> wide <bad>" (all 0
 * when every register held; "ymm n/a wide n/a" on a CPU without AVX). */
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

volatile long sink;

__attribute__((noinline, target("general-regs-only"))) long plain(long x)
{
  sink += x;
  return x + 1;
}

__attribute__((noinline)) double mix(double a, double b, double c, double d, double e, double f,
                                     double g, double h)
{
  return a + 2 * b + 3 * c + 4 * d + 5 * e + 6 * f + 7 * g + 8 * h;
}

static unsigned char pattern[256];

/* kept(fn, arg, seen): xmm0-15 = pattern, fn(arg), seen = xmm0-15 */
void kept(long (*fn)(long), long arg, unsigned char *seen);
__asm__(
    ".text\n.globl kept\n.type kept, @function\nkept:\n"
    "  push %rbx\n"
    "  mov %rdx, %rbx\n"
    "  mov %rdi, %rax\n"
    "  mov %rsi, %rdi\n"
    "  lea pattern(%rip), %rcx\n"
    "  movdqu 0(%rcx), %xmm0\n  movdqu 16(%rcx), %xmm1\n  movdqu 32(%rcx), %xmm2\n"
    "  movdqu 48(%rcx), %xmm3\n  movdqu 64(%rcx), %xmm4\n  movdqu 80(%rcx), %xmm5\n"
    "  movdqu 96(%rcx), %xmm6\n  movdqu 112(%rcx), %xmm7\n  movdqu 128(%rcx), %xmm8\n"
    "  movdqu 144(%rcx), %xmm9\n  movdqu 160(%rcx), %xmm10\n  movdqu 176(%rcx), %xmm11\n"
    "  movdqu 192(%rcx), %xmm12\n  movdqu 208(%rcx), %xmm13\n  movdqu 224(%rcx), %xmm14\n"
    "  movdqu 240(%rcx), %xmm15\n"
    "  call *%rax\n"
    "  movdqu %xmm0, 0(%rbx)\n  movdqu %xmm1, 16(%rbx)\n  movdqu %xmm2, 32(%rbx)\n"
    "  movdqu %xmm3, 48(%rbx)\n  movdqu %xmm4, 64(%rbx)\n  movdqu %xmm5, 80(%rbx)\n"
    "  movdqu %xmm6, 96(%rbx)\n  movdqu %xmm7, 112(%rbx)\n  movdqu %xmm8, 128(%rbx)\n"
    "  movdqu %xmm9, 144(%rbx)\n  movdqu %xmm10, 160(%rbx)\n  movdqu %xmm11, 176(%rbx)\n"
    "  movdqu %xmm12, 192(%rbx)\n  movdqu %xmm13, 208(%rbx)\n  movdqu %xmm14, 224(%rbx)\n"
    "  movdqu %xmm15, 240(%rbx)\n"
    "  pop %rbx\n"
    "  ret\n"
    ".size kept, .-kept\n");

/* kept_ymm(fn, arg, seen): ymm0-15 = pattern (512 bytes), fn(arg), seen = ymm0-15 */
void kept_ymm(long (*fn)(long), long arg, unsigned char *seen);
__asm__(
    ".text\n.globl kept_ymm\n.type kept_ymm, @function\nkept_ymm:\n"
    "  push %rbx\n"
    "  mov %rdx, %rbx\n"
    "  mov %rdi, %rax\n"
    "  mov %rsi, %rdi\n"
    "  lea wide_pattern(%rip), %rcx\n"
    "  vmovdqu 0(%rcx), %ymm0\n  vmovdqu 32(%rcx), %ymm1\n  vmovdqu 64(%rcx), %ymm2\n"
    "  vmovdqu 96(%rcx), %ymm3\n  vmovdqu 128(%rcx), %ymm4\n  vmovdqu 160(%rcx), %ymm5\n"
    "  vmovdqu 192(%rcx), %ymm6\n  vmovdqu 224(%rcx), %ymm7\n  vmovdqu 256(%rcx), %ymm8\n"
    "  vmovdqu 288(%rcx), %ymm9\n  vmovdqu 320(%rcx), %ymm10\n  vmovdqu 352(%rcx), %ymm11\n"
    "  vmovdqu 384(%rcx), %ymm12\n  vmovdqu 416(%rcx), %ymm13\n  vmovdqu 448(%rcx), %ymm14\n"
    "  vmovdqu 480(%rcx), %ymm15\n"
    "  call *%rax\n"
    "  vmovdqu %ymm0, 0(%rbx)\n  vmovdqu %ymm1, 32(%rbx)\n  vmovdqu %ymm2, 64(%rbx)\n"
    "  vmovdqu %ymm3, 96(%rbx)\n  vmovdqu %ymm4, 128(%rbx)\n  vmovdqu %ymm5, 160(%rbx)\n"
    "  vmovdqu %ymm6, 192(%rbx)\n  vmovdqu %ymm7, 224(%rbx)\n  vmovdqu %ymm8, 256(%rbx)\n"
    "  vmovdqu %ymm9, 288(%rbx)\n  vmovdqu %ymm10, 320(%rbx)\n  vmovdqu %ymm11, 352(%rbx)\n"
    "  vmovdqu %ymm12, 384(%rbx)\n  vmovdqu %ymm13, 416(%rbx)\n  vmovdqu %ymm14, 448(%rbx)\n"
    "  vmovdqu %ymm15, 480(%rbx)\n"
    "  vzeroupper\n"
    "  pop %rbx\n"
    "  ret\n"
    ".size kept_ymm, .-kept_ymm\n");

unsigned char wide_pattern[512];

__attribute__((noinline, target("avx"))) __m256d wide(__m256d a, __m256d b)
{
  return a * 2 + b;
}

static long bad_vectors, bad_mix, bad_ymm, bad_wide;
static int avx;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void round_of_calls(long i)
{
  unsigned char seen[256];
  double x = (double) (i % 1000);

  kept(plain, i, seen);
  if (memcmp(seen, pattern, sizeof seen) != 0)
  {
    pthread_mutex_lock(&lock);
    bad_vectors++;
    pthread_mutex_unlock(&lock);
  }
  if (mix(x, x + 1, x + 2, x + 3, x + 4, x + 5, x + 6, x + 7) != 36 * x + 168)
  {
    pthread_mutex_lock(&lock);
    bad_mix++;
    pthread_mutex_unlock(&lock);
  }
}

/* The AVX half of a round: the full ymm registers around plain(), and wide()'s. */
__attribute__((target("avx"))) static void round_of_wide_calls(long i)
{
  unsigned char seen[512];
  double x = (double) (i % 1000);
  __m256d a = { x, x + 1, x + 2, x + 3 }, b = { 1, 2, 3, 4 };
  __m256d want = { 2 * x + 1, 2 * x + 4, 2 * x + 7, 2 * x + 10 };
  __m256d got;

  kept_ymm(plain, i, seen);
  got = wide(a, b);
  if (memcmp(seen, wide_pattern, sizeof seen) != 0)
  {
    pthread_mutex_lock(&lock);
    bad_ymm++;
    pthread_mutex_unlock(&lock);
  }
  if (memcmp(&got, &want, sizeof got) != 0)
  {
    pthread_mutex_lock(&lock);
    bad_wide++;
    pthread_mutex_unlock(&lock);
  }
}

static long calls;

static void *worker(void *arg)
{
  (void) arg;
  for (long i = 0; i < calls; i++)
  {
    round_of_calls(i);
    if (avx)
      round_of_wide_calls(i);
  }
  return NULL;
}

int main(int argc, char **argv)
{
  pthread_t threads[2];

  calls = argc > 1 ? atol(argv[1]) : 1000;
  for (int i = 0; i < 256; i++)
    pattern[i] = (unsigned char) (i * 7 + 1);
  for (int i = 0; i < 512; i++)
    wide_pattern[i] = (unsigned char) (i * 13 + 5);
  avx = __builtin_cpu_supports("avx");
  worker(NULL);
  for (int i = 0; i < 2; i++)
    pthread_create(&threads[i], NULL, worker, NULL);
  for (int i = 0; i < 2; i++)
    pthread_join(threads[i], NULL);
  if (avx)
    printf("vectors %ld mix %ld ymm %ld wide %ld\n", bad_vectors, bad_mix, bad_ymm, bad_wide);
  else
    printf("vectors %ld mix %ld ymm n/a wide n/a\n", bad_vectors, bad_mix);
  return 0;
}
