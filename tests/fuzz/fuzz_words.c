/* libFuzzer target: word-level text corpora through nb_read_words.
 *
 * The input is the file. Properties: a failure names read_words and the input holds a NUL byte
 * (the one malformed text); a success gives ids within the vocabulary, each a word that maps back
 * to it, the last one "<eos>", as many "<eos>" as the input has lines (ends \n, \r\n and \r,
 * and a last line without one) unless the text holds that word itself, and the same ids when read
 * again against the vocabulary it built. */
#include "fuzz_common.h"
#include "nabla/data.h"

static char path[128];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_init(path, sizeof path, "words", ".txt");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_write(path, data, size);
    bool nul = memchr(data, 0, size) != NULL;
    int64_t lines = 0;
    for (size_t i = 0; i < size; i++)
        if (data[i] == '\n' || (data[i] == '\r' && !(i + 1 < size && data[i + 1] == '\n'))) lines++;
    if (size > 0 && data[size - 1] != '\n' && data[size - 1] != '\r') lines++;
    nb_vocab *v = nb_vocab_create();
    FUZZ_ASSERT(v);
    nb_tensor *t = nb_read_words(path, v, true);
    if (!t) {
        fuzz_check_error(nb_last_status(), "read_words");
        FUZZ_ASSERT(nul && nb_last_status() == NB_ERR_FORMAT);
        nb_vocab_free(v);
        return 0;
    }
    FUZZ_ASSERT(!nul);
    int64_t n = nb_tensor_size(t, 0), eos = nb_vocab_id(v, "<eos>"), seen = 0;
    const int64_t *ids = nb_tensor_data_ptr(t);
    FUZZ_ASSERT(n == 0 || ids[n - 1] == eos);
    for (int64_t i = 0; i < n; i++) {
        FUZZ_ASSERT(ids[i] >= 0 && ids[i] < nb_vocab_size(v));
        const char *w = nb_vocab_word(v, ids[i]);
        FUZZ_ASSERT(w && w[0] && nb_vocab_id(v, w) == ids[i]);
        seen += ids[i] == eos;
    }
    /* a word "<eos>" in the text is the same word (as in PyTorch's reader) */
    FUZZ_ASSERT(seen == lines || (seen > lines && memmem(data, size, "<eos>", 5)));
    int64_t size_before = nb_vocab_size(v);
    nb_tensor *again = nb_read_words(path, v, false);
    FUZZ_ASSERT(again && nb_tensor_size(again, 0) == n && nb_vocab_size(v) == size_before);
    FUZZ_ASSERT(n == 0 || memcmp(nb_tensor_data_ptr(again), ids, (size_t)n * sizeof *ids) == 0);
    nb_tensor_free(again);
    nb_tensor_free(t);
    nb_vocab_free(v);
    return 0;
}
