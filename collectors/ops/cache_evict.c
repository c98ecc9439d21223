/* Evict an address range from every cache level (pmdb's cold cache state, collectors/ops/cache_evict.py).
 *
 * x86-64: CLFLUSHOPT where CPUID says the CPU has it (weakly ordered: ~20 GB/s here), else CLFLUSH (ordered, ~10x
 * slower); aarch64: DC CIVAC (clean and invalidate to the point of coherency, allowed at EL0 on Linux). Each writes
 * a dirty line back and drops it from L1, L2 and the last-level cache, whatever their sizes, so a cold repetition
 * costs time in proportion to the op's operands, not to the machine's caches. A fence ends every call. */
#include <stddef.h>
#include <stdint.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>

__attribute__((target("clflushopt"))) static void evict_opt(uintptr_t p, uintptr_t end, size_t line) {
    for (; p < end; p += line) _mm_clflushopt((void *)p);
    _mm_sfence();
}

static void evict_plain(uintptr_t p, uintptr_t end, size_t line) {
    for (; p < end; p += line) _mm_clflush((const void *)p);
    _mm_mfence();
}

/* 2: CLFLUSHOPT, 1: CLFLUSH. */
int pmdb_evict_method(void) {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 23))) return 2;
    return 1;
}

void pmdb_evict(const void *addr, size_t nbytes, size_t line) {
    static int method = 0;
    uintptr_t p = (uintptr_t)addr & ~(uintptr_t)(line - 1), end = (uintptr_t)addr + nbytes;
    if (!method) method = pmdb_evict_method();
    if (method == 2) evict_opt(p, end, line); else evict_plain(p, end, line);
}

#elif defined(__aarch64__)
/* 3: DC CIVAC. */
int pmdb_evict_method(void) { return 3; }

void pmdb_evict(const void *addr, size_t nbytes, size_t line) {
    uintptr_t p = (uintptr_t)addr & ~(uintptr_t)(line - 1), end = (uintptr_t)addr + nbytes;
    for (; p < end; p += line) __asm__ volatile("dc civac, %0" ::"r"(p) : "memory");
    __asm__ volatile("dsb ish" ::: "memory");
}

#else
#error "no cache-line eviction instruction known for this architecture"
#endif
