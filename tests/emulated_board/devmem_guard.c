/*
 * The emulated board's /dev/mem guard, preloaded into every dynamic program
 * (/etc/ld.so.preload in the initramfs, so the boot services are covered too).
 *
 * A no-map region mapped through /dev/mem is Device memory on arm64. Cortex-A53 silicon
 * faults on an unaligned access to it and on DC ZVA; QEMU 10 faults on the first and not on
 * the second, and glibc's memset zeroes long ranges with DC ZVA. So the board cannot catch
 * every glibc string call on a mapping by itself: this library can. It wraps mmap to keep
 * the ranges mapped from the /dev/mem character device (major 1, minor 1) and aborts any
 * process that calls memcpy, memmove, memset, memcmp, bcmp, bzero, explicit_bzero, mempcpy
 * (or their _chk variants) on such a range, naming the call, its pointer and length:
 *     q25-devmem-guard: memcpy(0xffff..., 4096) on a /dev/mem mapping (Device memory)
 * Calls glibc makes internally do not pass through here (they are bound inside libc), which
 * is the part of the rule the disassembly check and QEMU itself cover.
 *
 * Built with -fno-builtin -fno-tree-loop-distribute-patterns: the fallback copies below
 * must stay loops, not become calls to the functions they stand in for.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
/* string.h declares bzero's buffer write-only: reading the pointer's value is what we do */
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define MAX_MAPS 64

static struct { uintptr_t start, end; } maps[MAX_MAPS];
static int nmaps;

static void *(*real_mmap)(void *, size_t, int, int, int, off_t);
static int (*real_munmap)(void *, size_t);
static void *(*real_memcpy)(void *, const void *, size_t);
static void *(*real_memmove)(void *, const void *, size_t);
static void *(*real_memset)(void *, int, size_t);
static int (*real_memcmp)(const void *, const void *, size_t);

static void resolve(void)
{
    static int resolving;
    if (real_mmap || resolving)
        return;
    resolving = 1;
    real_memcpy = dlsym(RTLD_NEXT, "memcpy");
    real_memmove = dlsym(RTLD_NEXT, "memmove");
    real_memset = dlsym(RTLD_NEXT, "memset");
    real_memcmp = dlsym(RTLD_NEXT, "memcmp");
    real_munmap = dlsym(RTLD_NEXT, "munmap");
    real_mmap = dlsym(RTLD_NEXT, "mmap");
    resolving = 0;
}

__attribute__((constructor)) static void guard_init(void)
{
    resolve();
}

static int on_devmem(const void *p, size_t n)
{
    uintptr_t a = (uintptr_t)p;
    if (!n)
        return 0;
    int count = __atomic_load_n(&nmaps, __ATOMIC_ACQUIRE);
    for (int i = 0; i < count; i++)
        if (a < maps[i].end && maps[i].start < a + n)
            return 1;
    return 0;
}

__attribute__((noreturn)) static void refuse(const char *call, const void *p, size_t n)
{
    char msg[160];
    int len = snprintf(msg, sizeof msg, "q25-devmem-guard: %s(%p, %zu) on a /dev/mem mapping (Device memory)\n",
                       call, p, n);
    if (len > 0)
        (void)!write(2, msg, (size_t)len < sizeof msg ? (size_t)len : sizeof msg - 1);
    abort();
}

static void check2(const char *call, const void *a, const void *b, size_t n)
{
    if (on_devmem(a, n))
        refuse(call, a, n);
    if (on_devmem(b, n))
        refuse(call, b, n);
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    resolve();
    void *p = real_mmap(addr, len, prot, flags, fd, off);
    struct stat st;
    if (p != MAP_FAILED && fd >= 0 && fstat(fd, &st) == 0 && S_ISCHR(st.st_mode) && major(st.st_rdev) == 1 &&
        minor(st.st_rdev) == 1) {
        int count = __atomic_load_n(&nmaps, __ATOMIC_ACQUIRE), i = 0;
        while (i < count && maps[i].end)
            i++;  /* a free slot (unmapped), or the next one */
        if (i < MAX_MAPS) {
            maps[i].start = (uintptr_t)p;
            maps[i].end = (uintptr_t)p + len;
            if (i == count)
                __atomic_store_n(&nmaps, i + 1, __ATOMIC_RELEASE);
        }
    }
    return p;
}
void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off) __attribute__((alias("mmap")));

int munmap(void *addr, size_t len)
{
    resolve();
    /* a mapping unmapped whole is forgotten; one unmapped in part stays listed whole */
    uintptr_t a = (uintptr_t)addr;
    int count = __atomic_load_n(&nmaps, __ATOMIC_ACQUIRE);
    for (int i = 0; i < count; i++)
        if (maps[i].end && a <= maps[i].start && maps[i].end <= a + len)
            maps[i].start = maps[i].end = 0;
    return real_munmap(addr, len);
}

void *memcpy(void *d, const void *s, size_t n)
{
    check2("memcpy", d, s, n);
    if (!real_memcpy) {
        for (size_t i = 0; i < n; i++)
            ((volatile char *)d)[i] = ((const char *)s)[i];
        return d;
    }
    return real_memcpy(d, s, n);
}

void *memmove(void *d, const void *s, size_t n)
{
    check2("memmove", d, s, n);
    if (!real_memmove) {
        if ((uintptr_t)d < (uintptr_t)s)
            for (size_t i = 0; i < n; i++)
                ((volatile char *)d)[i] = ((const char *)s)[i];
        else
            for (size_t i = n; i-- > 0;)
                ((volatile char *)d)[i] = ((const char *)s)[i];
        return d;
    }
    return real_memmove(d, s, n);
}

void *memset(void *d, int c, size_t n)
{
    if (on_devmem(d, n))
        refuse("memset", d, n);
    if (!real_memset) {
        for (size_t i = 0; i < n; i++)
            ((volatile char *)d)[i] = (char)c;
        return d;
    }
    return real_memset(d, c, n);
}

int memcmp(const void *a, const void *b, size_t n)
{
    check2("memcmp", a, b, n);
    if (!real_memcmp) {
        for (size_t i = 0; i < n; i++)
            if (((const unsigned char *)a)[i] != ((const unsigned char *)b)[i])
                return ((const unsigned char *)a)[i] < ((const unsigned char *)b)[i] ? -1 : 1;
        return 0;
    }
    return real_memcmp(a, b, n);
}

int bcmp(const void *a, const void *b, size_t n)
{
    check2("bcmp", a, b, n);
    return memcmp(a, b, n);
}

void *mempcpy(void *d, const void *s, size_t n)
{
    check2("mempcpy", d, s, n);
    return (char *)memcpy(d, s, n) + n;
}

void bzero(void *d, size_t n)
{
    if (on_devmem(d, n))
        refuse("bzero", d, n);
    memset(d, 0, n);
}

void explicit_bzero(void *d, size_t n)
{
    if (on_devmem(d, n))
        refuse("explicit_bzero", d, n);
    memset(d, 0, n);
    __asm__ volatile("" : : "r"(d) : "memory");
}

/* _FORTIFY_SOURCE's checked variants (the object size is not checked again here) */
void *__memcpy_chk(void *d, const void *s, size_t n, size_t dn)
{
    check2("__memcpy_chk", d, s, n);
    if (n > dn)
        abort();
    return memcpy(d, s, n);
}

void *__memmove_chk(void *d, const void *s, size_t n, size_t dn)
{
    check2("__memmove_chk", d, s, n);
    if (n > dn)
        abort();
    return memmove(d, s, n);
}

void *__memset_chk(void *d, int c, size_t n, size_t dn)
{
    if (on_devmem(d, n))
        refuse("__memset_chk", d, n);
    if (n > dn)
        abort();
    return memset(d, c, n);
}

void __explicit_bzero_chk(void *d, size_t n, size_t dn)
{
    if (n > dn)
        abort();
    explicit_bzero(d, n);
}
