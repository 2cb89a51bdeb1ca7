/*
 * test_quantize_args (CPU): the FP8 quantizer's argument checks and signs, without a GPU.
 * Every bad input of fa3_quantize_fp8 is refused with its status and a message naming the field
 * and the value, before the driver or NVRTC is touched (pointers here are made-up addresses that
 * are never dereferenced: a call that got past the checks would fail, or on a GPU machine fault,
 * so valid arguments are checked through fa3_quantize_validate, which launches nothing).
 * fa3_hadamard_signs against signs computed independently (Python, the splitmix64 of fa3jit.h)
 * and its errors; the quantizer's CUDA C compiles through NVRTC for sm_90 (skipped without NVRTC).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fa3jit.h"
#include "runtime/quantize.h"

static fa3_context *g_ctx;

#define X_ADDR 0x10000000u
#define OUT_ADDR 0x40000000u
#define DESCALE_ADDR 0x70000000u

/* bf16 x and e4m3 out (2, 100, 8, 128), contiguous; one descale per (batch, head). */
static fa3_quantize_args good(void)
{
    fa3_quantize_args a;
    fa3_quantize_args_init(&a);
    a.dtype = FA3_DTYPE_BF16;
    a.x = (const void *)(uintptr_t)X_ADDR;
    a.out = (void *)(uintptr_t)OUT_ADDR;
    a.descale = (float *)(uintptr_t)DESCALE_ADDR;
    a.batch = 2;
    a.seqlen = 100;
    a.num_heads = 8;
    a.head_dim = 128;
    a.x_head_stride = a.out_head_stride = 128;
    a.x_row_stride = a.out_row_stride = 8 * 128;
    a.x_batch_stride = a.out_batch_stride = 100 * 8 * 128;
    return a;
}

/* fa3_quantize_fp8 refuses a with want, its message holding words. */
static void expect_bad(const fa3_quantize_args *a, fa3_status want, const char *words,
                       const char *what)
{
    fa3_status st = fa3_quantize_fp8(g_ctx, a, NULL);
    const char *msg = fa3_last_error_message();
    if (st != want || !strstr(msg, words))
        fail_msg("%s: got %s (%s), want %s with \"%s\"", what, fa3_strerror(st), msg,
                 fa3_strerror(want), words);
}

#define BAD(want, words, stmt)                        \
    do {                                              \
        fa3_quantize_args a = good();                 \
        stmt;                                         \
        expect_bad(&a, (want), (words), #stmt);       \
    } while (0)

static void test_init(void **state)
{
    (void)state;
    fa3_quantize_args a;
    memset(&a, 0x5A, sizeof a);
    fa3_quantize_args_init(&a);
    assert_int_equal(a.struct_size, sizeof a);
    assert_int_equal(a.num_descale_heads, 0);
    assert_int_equal(a.hadamard, 0);
    assert_null(a.signs);
    assert_null(a.x);
    assert_true(a.seed == 0);
    fa3_quantize_args_init(NULL); /* ignored */
}

static void test_bad_arguments(void **state)
{
    (void)state;
    fa3_quantize_args g = good();
    assert_int_equal(fa3_quantize_fp8(NULL, &g, NULL), FA3_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fa3_last_error_message(), "ctx is NULL"));
    assert_int_equal(fa3_quantize_fp8(g_ctx, NULL, NULL), FA3_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fa3_last_error_message(), "args is NULL"));

    BAD(FA3_ERR_INVALID_ARGUMENT, "fa3_quantize_args", a.struct_size = 0);
    BAD(FA3_ERR_INVALID_ARGUMENT, "newer fa3jit.h", a.struct_size = sizeof a + 8);

    BAD(FA3_ERR_BAD_DTYPE, "args->dtype 2 is not supported", a.dtype = FA3_DTYPE_E4M3);
    BAD(FA3_ERR_BAD_DTYPE, "args->dtype -1", a.dtype = FA3_DTYPE_AUTO);
    BAD(FA3_ERR_BAD_DTYPE, "args->dtype 7", a.dtype = (fa3_dtype)7);

    BAD(FA3_ERR_INVALID_ARGUMENT, "args->x is NULL", a.x = NULL);
    BAD(FA3_ERR_INVALID_ARGUMENT, "args->out is NULL", a.out = NULL);
    BAD(FA3_ERR_INVALID_ARGUMENT, "args->descale is NULL", a.descale = NULL);

    BAD(FA3_ERR_BAD_SHAPE, "args->batch 0 must be at least 1", a.batch = 0);
    BAD(FA3_ERR_BAD_SHAPE, "args->seqlen -1 must be at least 1", a.seqlen = -1);
    BAD(FA3_ERR_BAD_SHAPE, "args->num_heads 0 must be at least 1", a.num_heads = 0);
    BAD(FA3_ERR_BAD_HEAD_DIM, "args->head_dim 0 must be at least 1", a.head_dim = 0);
    BAD(FA3_ERR_BAD_SHAPE, "args->num_descale_heads -2 must divide args->num_heads 8",
        a.num_descale_heads = -2);
    BAD(FA3_ERR_BAD_SHAPE, "args->num_descale_heads 3 must divide args->num_heads 8",
        a.num_descale_heads = 3);
    BAD(FA3_ERR_BAD_SHAPE, "args->num_descale_heads 16 must divide args->num_heads 8",
        a.num_descale_heads = 16);
    BAD(FA3_ERR_BAD_SHAPE, "exceed 2^62",
        (a.batch = 1 << 30, a.seqlen = 1 << 30, a.num_heads = 8));

    BAD(FA3_ERR_INVALID_ARGUMENT, "args->hadamard 2 must be 0 or 1", a.hadamard = 2);
    BAD(FA3_ERR_INVALID_ARGUMENT, "args->hadamard -1 must be 0 or 1", a.hadamard = -1);
    BAD(FA3_ERR_BAD_HEAD_DIM, "args->head_dim 96 cannot be rotated",
        (a.hadamard = 1, a.head_dim = 96, a.x_head_stride = a.out_head_stride = 96));
    BAD(FA3_ERR_BAD_HEAD_DIM, "args->head_dim 32 cannot be rotated",
        (a.hadamard = 1, a.head_dim = 32));
    BAD(FA3_ERR_BAD_HEAD_DIM, "args->head_dim 512 cannot be rotated",
        (a.hadamard = 1, a.head_dim = 512));

    BAD(FA3_ERR_BAD_ALIGNMENT, "args->x 0x10000001 is not 2-byte aligned",
        a.x = (const void *)(uintptr_t)(X_ADDR + 1));
    BAD(FA3_ERR_BAD_ALIGNMENT, "args->out 0x40000008 is not 16-byte aligned",
        a.out = (void *)(uintptr_t)(OUT_ADDR + 8));
    BAD(FA3_ERR_BAD_ALIGNMENT, "args->descale 0x70000002 is not 4-byte aligned",
        a.descale = (float *)(uintptr_t)(DESCALE_ADDR + 2));
    BAD(FA3_ERR_BAD_ALIGNMENT, "args->signs 0x7f000002 is not 4-byte aligned",
        (a.hadamard = 1, a.signs = (const float *)(uintptr_t)0x7f000002u));

    BAD(FA3_ERR_BAD_STRIDE, "args->x_batch_stride -1 is negative", a.x_batch_stride = -1);
    BAD(FA3_ERR_BAD_STRIDE, "args->x_row_stride -5 is negative", a.x_row_stride = -5);
    BAD(FA3_ERR_BAD_STRIDE, "args->x_head_stride -128 is negative", a.x_head_stride = -128);
    BAD(FA3_ERR_BAD_STRIDE, "args->out_batch_stride -16 is negative", a.out_batch_stride = -16);
    BAD(FA3_ERR_BAD_STRIDE, "args->out_row_stride 1032 elements = 1032 bytes is not a multiple "
        "of 16 bytes", a.out_row_stride = 1032);
    BAD(FA3_ERR_BAD_STRIDE, "args->out_head_stride 136 elements = 136 bytes is not a multiple",
        a.out_head_stride = 136);
    BAD(FA3_ERR_BAD_STRIDE, "args->out_batch_stride 1099511627776 elements is too large",
        a.out_batch_stride = (int64_t)1 << 40);
    BAD(FA3_ERR_BAD_STRIDE, "args->x strides (batch 4611686018427387904",
        a.x_batch_stride = (int64_t)1 << 62);
    /* out must not write one element twice */
    BAD(FA3_ERR_BAD_STRIDE, "args->out_head_stride 0 is smaller than the 128 elements",
        a.out_head_stride = 0);
    BAD(FA3_ERR_BAD_STRIDE, "args->out_head_stride 64 is smaller than the 128 elements it must "
        "step over (head_dim 128): elements of out would overlap", a.out_head_stride = 64);
    BAD(FA3_ERR_BAD_STRIDE, "args->out_row_stride 512 is smaller than the 1024 elements",
        a.out_row_stride = 512);

    /* out, descale: written, so they must not overlap anything the call reads or writes */
    BAD(FA3_ERR_INVALID_ARGUMENT, "args->out (bytes 0x10000000..",
        a.out = (void *)(uintptr_t)X_ADDR);
    BAD(FA3_ERR_INVALID_ARGUMENT, "overlaps args->x",
        a.out = (void *)(uintptr_t)(X_ADDR + 409600 - 16));
    BAD(FA3_ERR_INVALID_ARGUMENT, "args->descale (2 x 8 floats at 0x40000010) overlaps args->out",
        a.descale = (float *)(uintptr_t)(OUT_ADDR + 16));
    BAD(FA3_ERR_INVALID_ARGUMENT, "args->descale (2 x 4 floats at 0x10000100) overlaps args->x",
        (a.num_descale_heads = 4, a.descale = (float *)(uintptr_t)(X_ADDR + 256)));
    BAD(FA3_ERR_INVALID_ARGUMENT, "args->descale (2 x 8 floats at 0xffffffc) overlaps args->x",
        a.descale = (float *)(uintptr_t)(X_ADDR - 4));
    BAD(FA3_ERR_INVALID_ARGUMENT, "args->signs (128 floats at 0x40000100) overlaps args->out",
        (a.hadamard = 1, a.signs = (const float *)(uintptr_t)(OUT_ADDR + 256)));
    BAD(FA3_ERR_INVALID_ARGUMENT, "args->signs (128 floats at 0x6ffffe04) overlaps args->descale",
        (a.hadamard = 1, a.signs = (const float *)(uintptr_t)(DESCALE_ADDR - 508)));
}

static void test_valid_arguments(void **state)
{
    (void)state;
    fa3_quant_params p;
    fa3_quantize_args a = good();
    assert_int_equal(fa3_quantize_validate(&a, &p), FA3_OK);
    assert_true(p.total_rows == 2 * 100 * 8);
    assert_true(p.num_descales == 2 * 8);
    assert_int_equal(p.heads_per_descale, 1);
    assert_int_equal(p.rotate_t, 0);
    assert_true(p.signs == 0);
    assert_true(p.x == X_ADDR && p.out == OUT_ADDR && p.descale == DESCALE_ADDR);
    assert_true(p.o_rs == 8 * 128 && p.x_bs == 100 * 8 * 128);

    /* GQA grouping, the rotation with the seed's signs, fp16 */
    a.num_descale_heads = 2;
    a.hadamard = 1;
    a.dtype = FA3_DTYPE_FP16;
    a.seed = 99;
    assert_int_equal(fa3_quantize_validate(&a, &p), FA3_OK);
    assert_true(p.num_descales == 2 * 2);
    assert_int_equal(p.heads_per_descale, 4);
    assert_int_equal(p.num_descale_heads, 2);
    assert_int_equal(p.rotate_t, 4);
    assert_int_equal(p.is_fp16, 1);
    assert_true(p.seed == 99);
    assert_true(p.row_scale > 0.0883883f && p.row_scale < 0.0883884f);
    for (int hd = 64; hd <= 256; hd *= 2) {
        a = good();
        a.hadamard = 1;
        a.head_dim = hd;
        a.x_head_stride = a.out_head_stride = hd;
        a.x_row_stride = a.out_row_stride = 8 * hd;
        a.x_batch_stride = a.out_batch_stride = 100 * 8 * hd;
        a.signs = (const float *)(uintptr_t)0x7f000000u;
        assert_int_equal(fa3_quantize_validate(&a, &p), FA3_OK);
        assert_int_equal(p.rotate_t, hd / 32);
        assert_true(p.signs == 0x7f000000u);
    }

    /* no rotation: signs ignored (even misaligned), any head_dim */
    a = good();
    a.signs = (const float *)(uintptr_t)0x7f000002u;
    a.head_dim = 96;
    a.x_head_stride = a.out_head_stride = 96;
    assert_int_equal(fa3_quantize_validate(&a, &p), FA3_OK);
    assert_true(p.signs == 0);
    a.head_dim = 1;
    a.x_head_stride = 1;
    a.out_head_stride = 16;
    a.out_row_stride = 8 * 16;
    a.out_batch_stride = 100 * 8 * 16;
    assert_int_equal(fa3_quantize_validate(&a, &p), FA3_OK);

    /* strided x (2-byte aligned, any strides, broadcast heads); axes of one element take any
       out stride */
    a = good();
    a.x = (const void *)(uintptr_t)(X_ADDR + 2);
    a.x_row_stride = 3 * 8 * 128 + 1;
    a.x_head_stride = 0;
    a.batch = 1;
    a.out_batch_stride = 7;
    assert_int_equal(fa3_quantize_validate(&a, &p), FA3_OK);
    a.num_heads = 1;
    a.out_head_stride = -3 + 3; /* 0 with one head: never stepped */
    a.seqlen = 1;
    a.out_row_stride = 5;
    assert_int_equal(fa3_quantize_validate(&a, &p), FA3_OK);
    assert_true(p.total_rows == 1);

    /* out directly after x, descale directly after out: no overlap */
    a = good();
    a.out = (void *)(uintptr_t)(X_ADDR + 409600);
    a.descale = (float *)(uintptr_t)(X_ADDR + 409600 + 204800);
    assert_int_equal(fa3_quantize_validate(&a, &p), FA3_OK);
}

/* fa3_hadamard_signs: bit i of each mask is 1 where sign i is -1, from an independent Python
   implementation of the header's rule (bit 0 of splitmix64(seed + i)). */
static void test_hadamard_signs(void **state)
{
    (void)state;
    static const struct {
        uint64_t seed, mask;
    } known[] = {{0, 0xb345d63d0223b88bull},
                 {12345, 0xf3106a57916cb87eull},
                 {0xfedcba9876543210ull, 0x8f3cf3b00f0782a0ull}};
    float s[256], t[256];
    for (size_t k = 0; k < sizeof known / sizeof known[0]; k++) {
        assert_int_equal(fa3_hadamard_signs(known[k].seed, 64, s), FA3_OK);
        for (int i = 0; i < 64; i++) {
            float want = (known[k].mask >> i) & 1 ? -1.0f : 1.0f;
            if (s[i] != want)
                fail_msg("seed %llu sign %d: %g, want %g", (unsigned long long)known[k].seed, i,
                         (double)s[i], (double)want);
        }
    }
    /* deterministic, a prefix of the longer list, and seed + i wraps around 2^64 */
    assert_int_equal(fa3_hadamard_signs(777, 256, s), FA3_OK);
    assert_int_equal(fa3_hadamard_signs(777, 256, t), FA3_OK);
    assert_memory_equal(s, t, sizeof s);
    assert_int_equal(fa3_hadamard_signs(777, 100, t), FA3_OK);
    assert_memory_equal(s, t, 100 * sizeof(float));
    assert_int_equal(fa3_hadamard_signs(UINT64_MAX, 3, t), FA3_OK);
    assert_int_equal(fa3_hadamard_signs(0, 2, s), FA3_OK);
    assert_true(t[1] == s[0] && t[2] == s[1]);
    /* every value ±1, about half of each over many seeds */
    int neg = 0;
    for (uint64_t seed = 1; seed <= 64; seed++) {
        assert_int_equal(fa3_hadamard_signs(seed * 1000003u, 256, s), FA3_OK);
        for (int i = 0; i < 256; i++) {
            assert_true(s[i] == 1.0f || s[i] == -1.0f);
            neg += s[i] < 0;
        }
    }
    assert_true(neg > 64 * 128 - 400 && neg < 64 * 128 + 400);
    assert_int_equal(fa3_hadamard_signs(1, 1, s), FA3_OK);

    /* errors, out untouched */
    s[0] = 5.0f;
    assert_int_equal(fa3_hadamard_signs(1, 0, s), FA3_ERR_BAD_HEAD_DIM);
    assert_non_null(strstr(fa3_last_error_message(), "head_dim 0 must be at least 1"));
    assert_int_equal(fa3_hadamard_signs(1, -64, s), FA3_ERR_BAD_HEAD_DIM);
    assert_non_null(strstr(fa3_last_error_message(), "head_dim -64"));
    assert_true(s[0] == 5.0f);
    assert_int_equal(fa3_hadamard_signs(1, 64, NULL), FA3_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fa3_last_error_message(), "out is NULL"));
}

/* The kernels' CUDA C compiles for sm_90 (NVRTC, no GPU); older than sm_89 is refused. */
static void test_kernel_builds(void **state)
{
    (void)state;
    void *image = NULL;
    size_t size = 0;
    int is_ptx = -1;
    assert_int_equal(fa3_quantize_build_image(80, &image, &size, &is_ptx), FA3_ERR_UNSUPPORTED);
    assert_non_null(strstr(fa3_last_error_message(), "compute capability 80"));
    fa3_status st = fa3_quantize_build_image(90, &image, &size, &is_ptx);
    if (st == FA3_ERR_NO_NVRTC) {
        printf("SKIP: %s\n", fa3_last_error_message());
        skip(); /* no NVRTC on this machine */
    }
    if (st != FA3_OK)
        fail_msg("fa3_quantize_build_image: %s: %s", fa3_strerror(st), fa3_last_error_message());
    assert_non_null(image);
    assert_true(size > 16);
    if (is_ptx)
        assert_non_null(strstr((const char *)image, "fa3_quant_store_t8"));
    else
        assert_memory_equal(image, "\x7f" "ELF", 4);
    printf("  quantizer kernels: %zu-byte %s\n", size, is_ptx ? "PTX" : "cubin");
    free(image);
}

int main(void)
{
    fa3_context_options o;
    fa3_context_options_init(&o);
    o.disable_disk_cache = 1;
    if (fa3_context_create(&g_ctx, &o) != FA3_OK) {
        fprintf(stderr, "fa3_context_create: %s\n", fa3_last_error_message());
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_valid_arguments),
        cmocka_unit_test(test_hadamard_signs),
        cmocka_unit_test(test_kernel_builds),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    fa3_context_free(g_ctx);
    return failed;
}
