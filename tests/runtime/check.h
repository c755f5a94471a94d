/* The C tests' one assertion: CHECK(cond) counts a pass or prints the failed condition to
 * stderr; a test's main prints "N passed, M failed" and exits non-zero on any failure. */
#ifndef Q25_TEST_CHECK_H
#define Q25_TEST_CHECK_H
#include <stdio.h>

static int passed, failed;
#define CHECK(cond)                                                                                                   \
    do {                                                                                                              \
        if (cond)                                                                                                     \
            passed++;                                                                                                 \
        else {                                                                                                        \
            failed++;                                                                                                 \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                                           \
        }                                                                                                             \
    } while (0)
#endif
