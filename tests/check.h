/*
 * Assertion macros shared by the cmocka tests (include after <cmocka.h> and "fa3jit.h").
 *   CHECK(call)    — call must return FA3_OK; else the test fails naming the call, the status
 *                    and the library's last error message.
 *   REQUIRE_GPU()  — skips the calling test, printing why, when there is no usable driver or sm_90
 *                    device (gpu_available, gpu_util.h); counts skips in the file's g_skipped.
 */
#ifndef FA3JIT_TESTS_CHECK_H
#define FA3JIT_TESTS_CHECK_H

#define CHECK(call)                                                                     \
    do {                                                                                \
        fa3_status st_ = (call);                                                        \
        if (st_ != FA3_OK)                                                              \
            fail_msg("%s: %s: %s", #call, fa3_strerror(st_), fa3_last_error_message()); \
    } while (0)

#define REQUIRE_GPU()                                  \
    do {                                               \
        char why_[1024];                               \
        if (!gpu_available(why_, sizeof why_)) {       \
            printf("SKIP: %s\n", why_);                \
            g_skipped++;                               \
            skip(); /* no driver / no sm_90 device */  \
        }                                              \
    } while (0)

#endif
