/* Times q25_nl_tokenizer_runtime_image_open: open_bench IMAGE [N] -> "open_ns <no-crc> <crc>" */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "q25tok.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    FILE *f = fopen(argv[1], "rb");
    if (!f)
        return 1;
    fseek(f, 0, SEEK_END);
    size_t n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *img = malloc(n);
    if (!img || fread(img, 1, n, f) != n)
        return 1;
    fclose(f);
    int reps = argc > 2 ? atoi(argv[2]) : 2000;
    q25_bundle_view b;
    q25_encode_view *v = malloc(sizeof *v);
    q25_image_info info;
    double t0 = now();
    for (int i = 0; i < reps; i++)
        if (q25_nl_tokenizer_runtime_image_open(img, n, &b, v, &info, 0))
            return 3;
    double t1 = now();
    if (q25_nl_tokenizer_runtime_image_open(img, n, &b, v, &info, Q25_OPEN_VERIFY_CRC))
        return 3;
    double t2 = now();
    printf("open_ns %.0f %.0f\n", (t1 - t0) / reps, t2 - t1);
    return 0;
}
