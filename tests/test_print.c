/* Printing: every case of tests/ref/cases_print.py against PyTorch's str() (contiguous and
 * non-contiguous inputs), hand-written strings, snprintf semantics, nb_tensor_print, errors. */
#include <stdlib.h>
#include <string.h>

#include "nbtest.h"

/* The formatted string, malloc'd, checking that a sized call agrees with the length. */
static char *format(const nb_tensor *t)
{
    int n = nb_tensor_format(t, NULL, 0);
    if (n < 0) {
        print_error("nb_tensor_format failed: %s\n", nb_last_error());
        fail();
    }
    char *s = malloc((size_t)n + 1);
    assert_int_equal(nb_tensor_format(t, s, (size_t)n + 1), n);
    assert_int_equal(strlen(s), n);
    return s;
}

static void expect_str(const nb_tensor *t, const char *want, const char *what)
{
    char *got = format(t);
    if (strcmp(got, want) != 0) {
        print_error("%s:\n--- got ---\n%s\n--- want ---\n%s\n", what, got, want);
        free(got);
        fail();
    }
    free(got);
}

/* The expected text stored as uint8 bytes. */
static char *ref_string(const nb_tensor *bytes)
{
    int64_t n = nb_tensor_numel(bytes);
    char *s = malloc((size_t)n + 1);
    NBT_OK(nb_tensor_read(bytes, s, (size_t)n));
    s[n] = 0;
    return s;
}

static void test_reference(void **state)
{
    nb_scope *s = nb_scope_begin();
    nb_tensor_map *m = nbt_load_ref("print");
    char **names;
    int n = nbt_case_names(m, &names);
    assert_true(n > 60);
    for (int i = 0; i < n; i++) {
        nb_scope *cs = nb_scope_begin();
        nb_tensor *in = NBT_CHECK(nbt_ref(m, names[i], "in0"));
        char *want = ref_string(NBT_CHECK(nbt_ref(m, names[i], "str")));
        nb_tensor *rg = nbt_ref(m, names[i], "requires_grad"), *view = nbt_ref(m, names[i], "view");
        char what[300];
        if (rg || view) {
            nb_tensor *t = nbt_leaf(in);
            if (view) {
                int64_t shape[NB_MAX_DIMS];
                int nd = (int)nb_tensor_numel(view);
                NBT_OK(nb_tensor_read(view, shape, (size_t)nd * sizeof *shape));
                t = NBT_CHECK(nb_view(t, shape, nd));
            }
            snprintf(what, sizeof what, "%s", names[i]);
            expect_str(t, want, what);
        } else {
            snprintf(what, sizeof what, "%s (contiguous)", names[i]);
            expect_str(in, want, what);
            nb_dtype dt = nb_tensor_dtype(in);
            if (nb_tensor_numel(in) > 0 && dt != NB_FLOAT16 && dt != NB_BFLOAT16) { /* no CPU kernels */
                snprintf(what, sizeof what, "%s (non-contiguous)", names[i]);
                nb_tensor *nc = nbt_noncontig(in);
                assert_true(nb_tensor_ndim(in) == 0 || nb_tensor_numel(in) == 1 || !nb_tensor_is_contiguous(nc));
                expect_str(nc, want, what);
            }
        }
        free(want);
        nb_scope_end(cs);
    }
    nbt_free_names(names, n);
    nb_tensor_map_free(m);
    nb_scope_end(s);
}

/* Strings written by hand from PyTorch's rules. */
static void test_hand(void **state)
{
    nb_scope *s = nb_scope_begin();
    float a[] = {1.5f, -2.0f, 3.25f, 4.0f};
    int64_t sh[] = {2, 2}, n4 = 4;
    nb_tensor *t = NBT_CHECK(nb_tensor_from_data(a, sh, 2, NULL));
    expect_str(t, "tensor([[ 1.5000, -2.0000],\n        [ 3.2500,  4.0000]])", "2x2");
    expect_str(NBT_CHECK(nb_t(t)), "tensor([[ 1.5000,  3.2500],\n        [-2.0000,  4.0000]])", "transposed");
    expect_str(NBT_CHECK(nb_arange(0, 4, 1, NULL)), "tensor([0., 1., 2., 3.])", "arange float");
    nb_tensor_params pi = nb_tensor_params_default();
    pi.dtype = NB_INT64;
    expect_str(NBT_CHECK(nb_arange(-2, 2, 1, &pi)), "tensor([-2, -1,  0,  1])", "arange int64");
    pi.dtype = NB_INT32;
    expect_str(NBT_CHECK(nb_full(&n4, 1, 7, &pi)), "tensor([7, 7, 7, 7], dtype=torch.int32)", "int32");
    expect_str(NBT_CHECK(nb_scalar_tensor(0.5, NULL)), "tensor(0.5000)", "scalar");
    nb_tensor_params pd = nb_tensor_params_default();
    pd.dtype = NB_FLOAT64;
    pd.requires_grad = true;
    expect_str(NBT_CHECK(nb_scalar_tensor(2, &pd)), "tensor(2., dtype=torch.float64, requires_grad=True)",
               "scalar float64 leaf");
    pi.dtype = NB_BOOL;
    pi.requires_grad = false;
    expect_str(NBT_CHECK(nb_ones(&n4, 1, &pi)), "tensor([True, True, True, True])", "bool");
    if (nb_cuda_is_available()) {
        nb_tensor_params pc = nb_tensor_params_default();
        pc.device = (nb_device){NB_DEVICE_CUDA, 0};
        expect_str(NBT_CHECK(nb_ones(&n4, 1, &pc)), "tensor([1., 1., 1., 1.], device='cuda:0')", "cuda");
    }
    nb_scope_end(s);
}

static void test_snprintf_semantics(void **state)
{
    nb_scope *s = nb_scope_begin();
    nb_tensor *t = NBT_CHECK(nb_arange(0, 3, 1, NULL)); /* "tensor([0., 1., 2.])": 20 chars */
    char buf[64];
    memset(buf, 'x', sizeof buf);
    assert_int_equal(nb_tensor_format(t, buf, 8), 20);
    assert_string_equal(buf, "tensor(");
    assert_int_equal(buf[8], 'x'); /* nothing written past size */
    memset(buf, 'x', sizeof buf);
    assert_int_equal(nb_tensor_format(t, buf, 1), 20);
    assert_int_equal(buf[0], 0);
    assert_int_equal(buf[1], 'x');
    assert_int_equal(nb_tensor_format(t, buf, 20), 20);
    assert_string_equal(buf, "tensor([0., 1., 2.]"); /* truncated by one */
    assert_int_equal(nb_tensor_format(t, buf, 21), 20);
    assert_string_equal(buf, "tensor([0., 1., 2.])");

    FILE *f = tmpfile();
    assert_non_null(f);
    NBT_OK(nb_tensor_print(t, f));
    rewind(f);
    char line[64] = {0};
    assert_non_null(fgets(line, sizeof line, f));
    assert_string_equal(line, "tensor([0., 1., 2.])\n");
    fclose(f);
    nb_scope_end(s);
}

static void test_errors(void **state)
{
    char buf[16] = "abc";
    NBT_FAILS(nb_tensor_format(NULL, buf, sizeof buf) < 0, NB_ERR_INVALID_ARG, "tensor_format", "NULL", NULL);
    assert_int_equal(buf[0], 0);
    nb_tensor *t = NBT_CHECK(nb_zeros(NULL, 0, NULL));
    NBT_FAILS(nb_tensor_format(t, NULL, 5) < 0, NB_ERR_INVALID_ARG, "tensor_format", "NULL buffer", NULL);
    NBT_FAILS(nb_tensor_print(NULL, stdout) != NB_OK, NB_ERR_INVALID_ARG, "tensor_print", "tensor", NULL);
    NBT_FAILS(nb_tensor_print(t, NULL) != NB_OK, NB_ERR_INVALID_ARG, "tensor_print", "FILE", NULL);
    nb_tensor_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference),
        cmocka_unit_test(test_hand),
        cmocka_unit_test(test_snprintf_semantics),
        cmocka_unit_test(test_errors),
    };
    return NBT_RUN(tests);
}
