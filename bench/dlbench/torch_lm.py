"""DLBench's LSTM language model in PyTorch: the same model as nabla's nb_lstm_lm_create.

Embedding(vocab, embed) -> LSTM(embed, hidden, num_layers, batch_first=True) -> Linear(hidden,
vocab), under the submodule names encoder / rnn / decoder, so state_dicts match nabla's
(encoder.weight, rnn.weight_ih_l0, ..., decoder.weight, decoder.bias). PyTorch's default
initialisation. The LSTM has two bias vectors per layer (PyTorch/cuDNN), so DLBench's
configuration (vocab 10000, embed 256, hidden 256, 2 layers) has 6,182,672 parameters, 2,048 more
than the single-bias 6,180,624 of DLBench's table.

Used by the benchmark (bench/dlbench) and by tests/ref/cases_rnn_module.py. Runs under torch 1.13
and 2.x.
"""
import torch
from torch import nn


class LSTMLM(nn.Module):
    def __init__(self, vocab_size, embed_size, hidden_size, num_layers):
        super().__init__()
        self.encoder = nn.Embedding(vocab_size, embed_size)
        self.rnn = nn.LSTM(embed_size, hidden_size, num_layers=num_layers, batch_first=True)
        self.decoder = nn.Linear(hidden_size, vocab_size)

    def forward(self, tokens, state=None):
        """tokens: int64 [B, T]; state: (h, c), each [num_layers, B, hidden], or None (zeros).

        Returns (logits [B, T, vocab], (h_n, c_n)). For truncated BPTT, detach the returned
        state before passing it to the next call (nabla's stateful mode does that itself).
        """
        out, state = self.rnn(self.encoder(tokens), state)
        return self.decoder(out), state


def read_words(path, w2i, grow):
    """A word-level text as PyTorch's word_language_model example reads it (data.py's Corpus):
    each line's words, then '<eos>'; ids in the order words first appear in w2i, which grows
    with grow (the training text) and must hold every word without. A 1-D int64 tensor."""
    ids = []
    with open(path, "r", encoding="utf8") as f:
        for line in f:
            for w in line.split() + ["<eos>"]:
                if grow:
                    w2i.setdefault(w, len(w2i))
                ids.append(w2i[w])
    return torch.tensor(ids, dtype=torch.int64)


def detach_state(state):
    """The state with its graph cut, as carried between mini-batches."""
    return tuple(s.detach() for s in state)


if __name__ == "__main__":
    m = LSTMLM(10000, 256, 256, 2)
    print(sum(p.numel() for p in m.parameters()))
    logits, st = m(torch.zeros(2, 3, dtype=torch.int64))
    print(tuple(logits.shape), tuple(st[0].shape))
