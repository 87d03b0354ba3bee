/* Reference STREAM-style kernels (OpenMP, vectorized) for benchmarks/bench_bandwidth.py.
 * Usage: stream_ref N_DOUBLES REPS -> one JSON line of best GB/s per kernel.
 * Bytes are counted as STREAM counts them: read 8, copy 16, triad 24 per element.
 * The read loop is scheduled dynamically in 1 MiB chunks: on a quiet machine it reads what a
 * static loop reads (35.3 GB/s both on a 2-core Xeon VM), and beside a competing process a
 * thread that finishes takes the rest, so it reads the most the CPU time left can read (a
 * static loop waits for the thread that shares its CPU: 18-20 against 26-28 GB/s there). That
 * makes it the strictest reference for "competition never raises ggprof's figure". */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

/* Same allocation as ggprof: anonymous memory on transparent huge pages where offered. */
static double *alloc_doubles(size_t n) {
    void *p = mmap(0, n * 8, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { perror("mmap"); exit(1); }
#ifdef MADV_HUGEPAGE
    madvise(p, n * 8, MADV_HUGEPAGE);
#endif
    return p;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    size_t n = argc > 1 ? strtoull(argv[1], 0, 10) : (size_t)1 << 26;
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    double *a = alloc_doubles(n), *b = alloc_doubles(n), *c = alloc_doubles(n);
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) { a[i] = 1.0; b[i] = 2.0; c[i] = 0.5; }
    double best[3] = {0, 0, 0}, check = 0;
    for (int r = 0; r <= reps; r++) {  /* r == 0 is a warm-up */
        double t = now(), sum = 0;
#pragma omp parallel for reduction(+ : sum) schedule(dynamic, 131072)
        for (size_t i = 0; i < n; i++) sum += a[i];
        t = now() - t;
        check += sum;
        if (r && n * 8 / t > best[0]) best[0] = n * 8 / t;
        t = now();
#pragma omp parallel for
        for (size_t i = 0; i < n; i++) c[i] = a[i];
        t = now() - t;
        if (r && 2 * n * 8 / t > best[1]) best[1] = 2 * n * 8 / t;
        t = now();
#pragma omp parallel for
        for (size_t i = 0; i < n; i++) a[i] = b[i] + 3.0 * c[i];
        t = now() - t;
        if (r && 3 * n * 8 / t > best[2]) best[2] = 3 * n * 8 / t;
    }
    printf("{\"read\": %.6g, \"copy\": %.6g, \"triad\": %.6g, \"threads\": %d, \"check\": %g}\n",
           best[0] / 1e9, best[1] / 1e9, best[2] / 1e9, omp_get_max_threads(), check);
    return 0;
}
