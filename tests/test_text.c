/* Word-level text corpora (nb_read_words, nb_vocab) and language-model batches (nb_lm_batches):
 * hand-computed cases, the ids of PyTorch's word_language_model reader run by Python on the same
 * file, and the error paths. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nbtest.h"

static char g_tmp[256];

static const char *write_text(const char *name, const void *data, size_t n)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", g_tmp, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
    return path;
}

static void assert_ids(const nb_tensor *t, const int64_t *want, int64_t n)
{
    assert_int_equal(nb_tensor_ndim(t), 1);
    assert_int_equal(nb_tensor_dtype(t), NB_INT64);
    assert_int_equal(nb_tensor_size(t, 0), n);
    const int64_t *got = nb_tensor_data_ptr(t);
    for (int64_t i = 0; i < n; i++)
        if (got[i] != want[i]) fail_msg("token %lld: id %lld, want %lld", (long long)i, (long long)got[i], (long long)want[i]);
}

/* Lines ended by \n, \r\n, \r and the file's end; an empty line is "<eos>" alone; runs of spaces
 * and tabs are one separator. */
static void test_hand_case(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    const char text[] = "the cat  sat\non\tthe mat\n\nthe\r\nend\rcat";
    nb_vocab *v = NBT_CHECK(nb_vocab_create());
    nb_tensor *t = NBT_CHECK(nb_read_words(write_text("hand.txt", text, sizeof text - 1), v, true));
    /* the 0 cat 1 sat 2 <eos> 3 on 4 mat 5 end 6 */
    const int64_t want[] = {0, 1, 2, 3, 4, 0, 5, 3, 3, 0, 3, 6, 3, 1, 3};
    assert_ids(t, want, 15);
    assert_int_equal(nb_vocab_size(v), 7);
    const char *words[] = {"the", "cat", "sat", "<eos>", "on", "mat", "end"};
    for (int i = 0; i < 7; i++) {
        assert_string_equal(nb_vocab_word(v, i), words[i]);
        assert_int_equal(nb_vocab_id(v, words[i]), i);
    }
    assert_null(nb_vocab_word(v, 7));
    assert_null(nb_vocab_word(v, -1));
    assert_int_equal(nb_vocab_id(v, "dog"), -1);
    assert_int_equal(nb_vocab_id(v, "ca"), -1); /* a prefix of a word is another word */
    assert_int_equal(nb_vocab_id(v, "cats"), -1);
    /* an empty file has no line; a lone line end is one empty line */
    t = NBT_CHECK(nb_read_words(write_text("empty.txt", "", 0), v, true));
    assert_int_equal(nb_tensor_size(t, 0), 0);
    t = NBT_CHECK(nb_read_words(write_text("nl.txt", "\n", 1), v, true));
    const int64_t eos[] = {3};
    assert_ids(t, eos, 1);
    nb_vocab_free(v);
    nb_scope_end(s);
}

/* White space as Python's str.split(): \v, \f, \x1c-\x1f and Unicode's spaces in UTF-8 separate
 * words (but do not end a line); other multi-byte characters, U+200B (zero width space, not a
 * space to Python) among them, belong to the word. */
static void test_unicode_space(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    const char text[] = "a\xc2\xa0"
                        "b\xe2\x80\x83"
                        "c\xe3\x80\x80"
                        "d\x1f"
                        "e\vf\fg\xe2\x80\xa8h \xc3\xa9t\xc3\xa9 x\xe2\x80\x8by\xe2\x81\x9f"
                        "z\xc2\x85"
                        "w\n";
    nb_vocab *v = NBT_CHECK(nb_vocab_create());
    nb_tensor *t = NBT_CHECK(nb_read_words(write_text("uni.txt", text, sizeof text - 1), v, true));
    const int64_t want[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    assert_ids(t, want, 13);
    assert_string_equal(nb_vocab_word(v, 8), "\xc3\xa9t\xc3\xa9");
    assert_string_equal(nb_vocab_word(v, 9), "x\xe2\x80\x8by");
    assert_string_equal(nb_vocab_word(v, 10), "z");
    assert_string_equal(nb_vocab_word(v, 12), "<eos>");
    nb_vocab_free(v);
    nb_scope_end(s);
}

/* The reader of PyTorch's word_language_model example (data.py), run by Python on the same file. */
static const char *PY = "import sys\n"
                        "w2i={}\n"
                        "ids=[]\n"
                        "with open(sys.argv[1],'r',encoding='utf8') as f:\n"
                        "  for line in f:\n"
                        "    for w in line.split()+['<eos>']:\n"
                        "      if w not in w2i: w2i[w]=len(w2i)\n"
                        "      ids.append(w2i[w])\n"
                        "print(len(w2i),len(ids))\n"
                        "print(*ids)\n"
                        "for w in w2i: print(w.encode('utf8').hex())\n";

/* A text drawn from words and separators that exercise every rule, seeded. */
static size_t make_text(char *buf, size_t cap, unsigned seed)
{
    const char *words[] = {"the", "N", "<unk>", "a", "cat's", "\xc3\xa9t\xc3\xa9", "x\xe2\x80\x8by", "$", "1.5", "of"};
    const char *seps[] = {" ", "  ", "\t", "\n", "\r\n", "\r", "\v", "\f", "\x1c", "\xc2\xa0", "\xe2\x80\xa8",
                          "\xe3\x80\x80", " \n", "\n\n"};
    size_t n = 0;
    for (int i = 0; i < 3000; i++) {
        seed = seed * 1103515245u + 12345u;
        const char *w = words[(seed >> 16) % 10];
        seed = seed * 1103515245u + 12345u;
        const char *sp = seps[(seed >> 16) % 14];
        size_t lw = strlen(w), ls = strlen(sp);
        assert_true(n + lw + ls < cap);
        memcpy(buf + n, w, lw), n += lw;
        memcpy(buf + n, sp, ls), n += ls;
    }
    return n;
}

static void test_against_python(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    static char text[65536];
    size_t n = make_text(text, sizeof text, 7);
    char path[512], cmd[1200];
    snprintf(path, sizeof path, "%s", write_text("corpus.txt", text, n));
    write_text("ref.py", PY, strlen(PY));
    const char *py = getenv("NB_PYTHON");
    snprintf(cmd, sizeof cmd, "%s %s/ref.py %s", py && access(py, X_OK) == 0 ? py : "python3", g_tmp, path);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    long nv = 0, nt = 0;
    assert_int_equal(fscanf(p, "%ld %ld", &nv, &nt), 2);
    assert_true(nv == 11 && nt > 3000);
    int64_t *want = malloc((size_t)nt * sizeof *want);
    assert_non_null(want);
    for (long i = 0; i < nt; i++) {
        long id;
        assert_int_equal(fscanf(p, "%ld", &id), 1);
        want[i] = id;
    }
    nb_vocab *v = NBT_CHECK(nb_vocab_create());
    nb_tensor *t = NBT_CHECK(nb_read_words(path, v, true));
    assert_ids(t, want, nt);
    assert_int_equal(nb_vocab_size(v), nv);
    for (long i = 0; i < nv; i++) {
        char hex[64], mine[64] = "";
        assert_int_equal(fscanf(p, "%63s", hex), 1);
        const char *w = nb_vocab_word(v, i);
        for (size_t k = 0; w[k] && k < 30; k++) snprintf(mine + 2 * k, 3, "%02x", (unsigned char)w[k]);
        assert_string_equal(mine, hex);
    }
    assert_int_equal(pclose(p), 0);
    free(want);
    nb_vocab_free(v);
    nb_scope_end(s);
}

/* The validation text read against the training text's vocabulary: known words keep their ids,
 * an unknown one fails naming it and its line, and the vocabulary is left as it was. */
static void test_fixed_vocab(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    nb_vocab *v = NBT_CHECK(nb_vocab_create());
    const char train[] = "a b c\nc b\n";
    NBT_CHECK(nb_read_words(write_text("train.txt", train, sizeof train - 1), v, true));
    assert_int_equal(nb_vocab_size(v), 4);
    const char valid[] = "c a\n\nb";
    nb_tensor *t = NBT_CHECK(nb_read_words(write_text("valid.txt", valid, sizeof valid - 1), v, false));
    const int64_t want[] = {2, 0, 3, 3, 1, 3};
    assert_ids(t, want, 6);
    const char test[] = "a b\nb zebra c\n";
    const char *path = write_text("test.txt", test, sizeof test - 1);
    NBT_FAILS(nb_read_words(path, v, false) == NULL, NB_ERR_FORMAT, "read_words", "test.txt", "line 2", "'zebra'",
              "4 words", NULL);
    assert_int_equal(nb_vocab_size(v), 4);
    /* a vocabulary without "<eos>" cannot end a line */
    nb_vocab *w = NBT_CHECK(nb_vocab_create());
    assert_int_equal(nb_vocab_add(w, "a"), 0);
    assert_int_equal(nb_vocab_add(w, "a"), 0);
    NBT_FAILS(nb_read_words(write_text("a.txt", "a a\n", 4), w, false) == NULL, NB_ERR_FORMAT, "'<eos>'", "line 1",
              NULL);
    nb_vocab_free(w);
    nb_vocab_free(v);
    nb_scope_end(s);
}

static void test_errors(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    nb_vocab *v = NBT_CHECK(nb_vocab_create());
    char path[600];
    snprintf(path, sizeof path, "%s/none.txt", g_tmp);
    NBT_FAILS(nb_read_words(path, v, true) == NULL, NB_ERR_IO, "read_words", "none.txt", NULL);
    NBT_FAILS(nb_read_words(g_tmp, v, true) == NULL, NB_ERR_IO, "read_words", NULL); /* a directory */
    NBT_FAILS(nb_read_words(NULL, v, true) == NULL, NB_ERR_INVALID_ARG, "read_words", NULL);
    NBT_FAILS(nb_read_words(path, NULL, true) == NULL, NB_ERR_INVALID_ARG, "read_words", NULL);
    const char bin[] = "ok words\nthen\0binary\n";
    NBT_FAILS(nb_read_words(write_text("bin.txt", bin, sizeof bin - 1), v, true) == NULL, NB_ERR_FORMAT, "bin.txt",
              "line 2", "NUL", NULL);
    assert_int_equal(nb_vocab_size(v), 0); /* the NUL is found before any word is added */
    /* a long unknown word is cut in the message */
    char longw[300];
    memset(longw, 'q', 200);
    memcpy(longw + 200, "\n", 2);
    NBT_FAILS(nb_read_words(write_text("long.txt", longw, 201), v, false) == NULL, NB_ERR_FORMAT, "qqqqqqqqqq...'",
              NULL);
    NBT_FAILS(nb_vocab_add(v, "") < 0, NB_ERR_INVALID_ARG, "vocab_add", "empty", NULL);
    NBT_FAILS(nb_vocab_add(NULL, "a") < 0, NB_ERR_INVALID_ARG, "vocab_add", NULL);
    assert_int_equal(nb_vocab_size(NULL), 0);
    assert_null(nb_vocab_word(NULL, 0));
    assert_int_equal(nb_vocab_id(NULL, "a"), -1);
    nb_vocab_free(NULL);
    nb_vocab_free(v);
    nb_scope_end(s);
}

/* Many words: the table grows (rehashes) and every id and lookup stays right. */
static void test_vocab_many(void **state)
{
    (void)state;
    nb_vocab *v = NBT_CHECK(nb_vocab_create());
    char w[32];
    for (int i = 0; i < 100000; i++) {
        snprintf(w, sizeof w, "w%d", i * 7919 % 100003);
        assert_int_equal(nb_vocab_add(v, w), i);
    }
    assert_int_equal(nb_vocab_size(v), 100000);
    for (int i = 0; i < 100000; i += 97) {
        snprintf(w, sizeof w, "w%d", i * 7919 % 100003);
        assert_int_equal(nb_vocab_id(v, w), i);
        assert_string_equal(nb_vocab_word(v, i), w);
        assert_int_equal(nb_vocab_add(v, w), i);
    }
    assert_int_equal(nb_vocab_id(v, "w100002x"), -1);
    nb_vocab_free(v);
}

/* Batches of the stream 0, 1, ..., 31 in 3 rows of 10 (two tokens dropped), 4 steps: row r of
 * batch k is 10 r + 4 k + [0, 4), its targets one further; (10 - 1) / 4 = 2 batches an epoch. */
static void test_lm_batches(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    nb_tensor_params ip = nb_tensor_params_default();
    ip.dtype = NB_INT64;
    nb_tensor *tok = NBT_CHECK(nb_arange(0, 32, 1, &ip));
    nb_lm_batches *b = NBT_CHECK(nb_lm_batches_create(tok, 3, 4, nb_cpu()));
    assert_int_equal(nb_lm_batches_len(b), 2);
    NBT_OK(nb_fill_(tok, -1)); /* the batches are a copy */
    for (int epoch = 0; epoch < 2; epoch++) {
        for (int k = 0; k < 2; k++) {
            nb_tensor *x, *y;
            bool done = true;
            NBT_OK(nb_lm_batches_next(b, &x, &y, &done));
            assert_false(done);
            assert_int_equal(nb_tensor_ndim(x), 2);
            assert_int_equal(nb_tensor_size(x, 0), 3);
            assert_int_equal(nb_tensor_size(x, 1), 4);
            assert_int_equal(nb_tensor_size(y, 1), 4);
            assert_true(nb_tensor_is_contiguous_format(x, NB_CONTIGUOUS_FORMAT));
            const int64_t *px = nb_tensor_data_ptr(x), *py = nb_tensor_data_ptr(y);
            for (int r = 0; r < 3; r++)
                for (int j = 0; j < 4; j++) {
                    assert_int_equal(px[r * 4 + j], 10 * r + 4 * k + j);
                    assert_int_equal(py[r * 4 + j], 10 * r + 4 * k + j + 1);
                }
            NBT_OK(nb_fill_(x, -5)); /* a copy: the next epoch's batch is unchanged */
        }
        nb_tensor *x = tok, *y = tok;
        bool done = false;
        NBT_OK(nb_lm_batches_next(b, &x, &y, &done));
        assert_true(done);
        assert_null(x);
        assert_null(y);
    }
    nb_lm_batches_free(b);
    /* bptt 9 fits once in rows of 10; bptt 10 leaves no next token for the last step */
    tok = NBT_CHECK(nb_arange(0, 32, 1, &ip));
    b = NBT_CHECK(nb_lm_batches_create(tok, 3, 9, nb_cpu()));
    assert_int_equal(nb_lm_batches_len(b), 1);
    nb_lm_batches_free(b);
    NBT_FAILS(nb_lm_batches_create(tok, 3, 10, nb_cpu()) == NULL, NB_ERR_INVALID_ARG, "lm_batches", "32 tokens",
              "3 rows of 10", "10 steps", NULL);
    NBT_FAILS(nb_lm_batches_create(tok, 0, 4, nb_cpu()) == NULL, NB_ERR_INVALID_ARG, "lm_batches", "batch 0", NULL);
    NBT_FAILS(nb_lm_batches_create(tok, 2, 0, nb_cpu()) == NULL, NB_ERR_INVALID_ARG, "bptt 0", NULL);
    NBT_FAILS(nb_lm_batches_create(NULL, 2, 4, nb_cpu()) == NULL, NB_ERR_INVALID_ARG, "lm_batches", NULL);
    int64_t sh[2] = {4, 8};
    NBT_FAILS(nb_lm_batches_create(nb_reshape(tok, sh, 2), 2, 2, nb_cpu()) == NULL, NB_ERR_SHAPE, "lm_batches",
              "1-D", NULL);
    NBT_FAILS(nb_lm_batches_create(nb_to_dtype(tok, NB_FLOAT32), 2, 2, nb_cpu()) == NULL, NB_ERR_DTYPE, "lm_batches",
              "int64", NULL);
    nb_tensor *x, *y;
    bool done;
    NBT_FAILS(nb_lm_batches_next(NULL, &x, &y, &done) != NB_OK, NB_ERR_INVALID_ARG, "lm_batches_next", NULL);
    assert_int_equal(nb_lm_batches_len(NULL), 0);
    nb_lm_batches_free(NULL);
    /* on a GPU the batches are the CPU's; without one the device is refused */
    nb_device cu = {NB_DEVICE_CUDA, 0};
    if (nb_device_check(cu) == NB_OK) {
        b = NBT_CHECK(nb_lm_batches_create(tok, 3, 4, cu));
        NBT_OK(nb_lm_batches_next(b, &x, &y, &done));
        nb_tensor *hx = NBT_CHECK(nb_to(x, nb_cpu()));
        assert_int_equal(((const int64_t *)nb_tensor_data_ptr(hx))[5], 11);
        nb_lm_batches_free(b);
    } else {
        NBT_FAILS(nb_lm_batches_create(tok, 3, 4, cu) == NULL, NB_ERR_DEVICE, NULL);
    }
    nb_scope_end(s);
}

static int setup(void **state)
{
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "%s/nbtextXXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    return mkdtemp(g_tmp) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_case),   cmocka_unit_test(test_unicode_space), cmocka_unit_test(test_against_python),
        cmocka_unit_test(test_fixed_vocab), cmocka_unit_test(test_errors),        cmocka_unit_test(test_vocab_many),
        cmocka_unit_test(test_lm_batches),
    };
    return NBT_RUN_GROUP(tests, setup, teardown);
}
