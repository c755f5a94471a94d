/* Times q25_nl_tokenizer_runtime_image_open: open_bench IMAGE [N] ->
 *   "open_ns <no-crc> <crc>"          the checks alone, on an image already in memory
 *   "load_ns <mmap> <read>"           open(2) + fstat + the image into the process + the
 *                                     checks + release, page cache warm: through a MAP_PRIVATE
 *                                     mapping (q25tok before issue 44) and read(2) into
 *                                     malloc'd memory (q25tok now: what it checks is what it uses) */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "q25tok.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static q25_bundle_view b;
static q25_image_info info;

/* one load of the image, as q25tok did (mapped) or does (read); 0 when it opened */
static int load(const char *path, q25_encode_view *v, int mapped)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0)
        return 1;
    size_t n = (size_t)st.st_size, got = 0;
    void *p = mapped ? mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0) : malloc(n);
    if (p == MAP_FAILED || !p)
        return 1;
    while (!mapped && got < n) {
        ssize_t r = read(fd, (char *)p + got, n - got);
        if (r <= 0)
            return 1;
        got += (size_t)r;
    }
    close(fd);
    int rc = q25_nl_tokenizer_runtime_image_open(p, n, &b, v, &info, 0);
    if (mapped)
        munmap(p, n);
    else
        free(p);
    return rc;
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
    q25_encode_view *v = malloc(sizeof *v);
    double t0 = now();
    for (int i = 0; i < reps; i++)
        if (q25_nl_tokenizer_runtime_image_open(img, n, &b, v, &info, 0))
            return 3;
    double t1 = now();
    if (q25_nl_tokenizer_runtime_image_open(img, n, &b, v, &info, Q25_OPEN_VERIFY_CRC))
        return 3;
    double t2 = now();
    printf("open_ns %.0f %.0f\n", (t1 - t0) / reps, t2 - t1);
    /* interleaved, best of: each way sees the same machine */
    double best[2] = {1e18, 1e18};
    int rounds = reps / 20 > 10 ? reps / 20 : 10;
    for (int i = 0; i < rounds; i++)
        for (int mapped = 1; mapped >= 0; mapped--) {
            double s = now();
            if (load(argv[1], v, mapped))
                return 3;
            double t = now() - s;
            if (t < best[!mapped])
                best[!mapped] = t;
        }
    printf("load_ns %.0f %.0f\n", best[0], best[1]);
    return 0;
}
