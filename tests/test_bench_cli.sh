#!/usr/bin/env bash
# Tests of `nabla bench` (issue 5, item 1; tools/cmd_bench.c) on tiny settings: the json, csv and
# table outputs are well formed and carry the spec's figures (parameter counts and forward FLOPs
# from ../shared/bench/DLBENCH.md and the zoo's documented counts, not from our own output), the
# statistics are consistent, --seed reproduces, and every usage error exits 2 with one line.
# Usage: test_bench_cli.sh PATH/TO/nabla. Needs python3 (to parse the JSON).
set -uo pipefail
nabla=$(realpath "${1:?usage: test_bench_cli.sh PATH/TO/nabla}")
tb="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/bench/dlbench/torch_bench.py"
. "$(dirname "${BASH_SOURCE[0]}")/cli_common.sh"
command -v python3 >/dev/null || { echo "FAIL: python3 not found (needed to check the JSON)"; exit 1; }

tiny=(--batch-size 4 --iters 2 --warmup 1)
tinier=(--batch-size 4 --iters 1 --warmup 0) # csv and table: the format is what they test (fast under ASan)

# ---- json: one object per (model, threads), in order, with the spec's numbers ----
if "$nabla" bench --model fcn-r,cnn --threads 1,2 "${tiny[@]}" --format json > j.txt 2> j.err; then
    if python3 - j.txt <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
# parameter counts: DLBENCH.md (FCN-R) and src/nn/models.c's documented cnn (422k: 421,834 for 1x28x28,
# 10 classes: 32*9+32 + 2*32 + 64*32*9+64 + 2*64 + 3136*128+128 + 128*10+10)
cnn_params = (32 * 9 + 32) + 64 + (64 * 32 * 9 + 64) + 128 + (3136 * 128 + 128) + (128 * 10 + 10)
# forward FLOPs: DLBENCH.md's table (FCN-R); cnn's 2 x MACs of its two convs and two linears
cnn_flops = 2 * (28 * 28 * 32 * 9 + 14 * 14 * 64 * 32 * 9 + 3136 * 128 + 128 * 10)
want = [("fcn-r", 1, 14205962, 28.4e6), ("fcn-r", 2, 14205962, 28.4e6),
        ("cnn", 1, cnn_params, cnn_flops), ("cnn", 2, cnn_params, cnn_flops)]
assert len(rows) == 4, f"{len(rows)} rows, expected 4"
fields = ["impl", "model", "device", "threads", "batch", "iters", "warmup", "median_s", "q1_s", "q3_s", "min_s",
          "max_s", "samples_per_s", "gflops", "fwd_flops_per_sample", "params", "peak_rss_mb", "peak_alloc_mb", "loss"]
for r, (m, t, params, flops) in zip(rows, want):
    missing = [f for f in fields if f not in r]
    assert not missing, f"{m}: missing {missing}"
    assert (r["impl"], r["model"], r["device"], r["threads"]) == ("nabla", m, "cpu", t), r
    assert (r["batch"], r["iters"], r["warmup"]) == (4, 2, 1), r
    assert r["params"] == params, f"{m}: params {r['params']} != {params}"
    assert abs(r["fwd_flops_per_sample"] - flops) <= 1e-3 * flops, f"{m}: {r['fwd_flops_per_sample']} != {flops}"
    assert 0 < r["min_s"] <= r["q1_s"] <= r["median_s"] <= r["q3_s"] <= r["max_s"], r
    assert abs(r["median_s"] - (r["min_s"] + r["max_s"]) / 2) <= 1e-6 * r["max_s"], "median of 2 = their mean"
    assert math.isclose(r["samples_per_s"], 4 / r["median_s"], rel_tol=1e-4), r
    assert math.isclose(r["gflops"], 3 * r["fwd_flops_per_sample"] * 4 / r["median_s"] * 1e-9, rel_tol=1e-4), r
    assert r["peak_rss_mb"] > 1 and r["peak_alloc_mb"] > 0, r
    # 10 classes, random labels, a fresh net: the loss is near ln 10, certainly within (0, 20)
    assert 0 < r["loss"] < 20, r
print("json rows ok")
PY
    then pass "json: 4 well-formed rows with the spec's parameters and FLOPs"
    else fail "json rows: $(cat j.txt)"; fi
else
    fail "bench --format json exited non-zero: $(cat j.err)"
fi

# ---- the LSTM (stateful, two iterations) and sgemm (batch fixed at 1) ----
if "$nabla" bench --model lstm,sgemm --threads 1 --batch-size 2 --iters 1 --warmup 1 --format json > l.txt 2> l.err &&
   python3 - l.txt <<'PY'
import json, sys
lstm, sgemm = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
# DLBENCH.md: 6,180,624 with one bias per layer; PyTorch's LSTM has two (+ 2 layers x 4 x 256)
assert lstm["model"] == "lstm" and lstm["params"] == 6180624 + 2 * 4 * 256, lstm
assert lstm["batch"] == 2 and abs(lstm["fwd_flops_per_sample"] - 231e6) < 1e3, lstm
assert 5 < lstm["loss"] < 15, lstm  # ln 10000 = 9.2 for a fresh model on random tokens
assert sgemm["model"] == "sgemm" and sgemm["batch"] == 1, sgemm
assert abs(sgemm["gflops"] - 2 * 2048**3 / sgemm["median_s"] * 1e-9) < 1e-3 * sgemm["gflops"], sgemm
PY
then pass "lstm and sgemm rows"; else fail "lstm/sgemm: $(cat l.txt l.err)"; fi

# ---- --seed: the same seed gives the same losses, another seed others ----
run_loss() { "$nabla" bench --model cnn --threads 1 "${tiny[@]}" --seed "$1" --format json 2>/dev/null |
             python3 -c 'import json,sys; print(repr(json.loads(sys.stdin.readline())["loss"]))'; }
a=$(run_loss 5); b=$(run_loss 5); c=$(run_loss 6)
if [[ -n "$a" && "$a" == "$b" && "$a" != "$c" ]]; then pass "seed: $a == $b != $c"
else fail "seed: losses '$a' '$b' (same seed) '$c' (other seed)"; fi

# ---- csv: a header and one row per setting, all of the same width ----
if "$nabla" bench --model fcn-r,cnn --threads 1 "${tinier[@]}" --format csv > c.txt 2> c.err &&
   python3 - c.txt <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
head = rows[0]
assert head[:4] == ["impl", "model", "device", "threads"] and "median_s" in head and "gflops" in head, head
assert len(rows) == 3 and all(len(r) == len(head) for r in rows), rows
for r in rows[1:]:
    d = dict(zip(head, r))
    assert d["impl"] == "nabla" and d["error"] == "" and float(d["median_s"]) > 0 and float(d["samples_per_s"]) > 0, d
assert [r[1] for r in rows[1:]] == ["fcn-r", "cnn"]
PY
then pass "csv"; else fail "csv: $(cat c.txt c.err)"; fi

# ---- table: rows are networks, columns thread counts, then the details ----
if "$nabla" bench --model fcn-r,cnn --threads 1,2 "${tinier[@]}" > t.txt 2> t.err &&
   grep -Eq '^network +batch +parameters +1 thread +2 threads$' t.txt &&
   grep -Eq '^fcn-r +4 +14205962 +[0-9.e+-]+ +[0-9.e+-]+$' t.txt &&
   grep -Eq '^cnn +4 +421834 +[0-9.e+-]+ +[0-9.e+-]+$' t.txt &&
   [[ $(grep -Ec '^(fcn-r|cnn) +[12] +[0-9.e+-]+( +[0-9.e+-]+){6}$' t.txt) -eq 4 ]] && [[ ! -s t.err ]]
then pass "table"; else fail "table: $(cat t.txt t.err)"; fi

# ---- PyTorch's side (bench/dlbench/torch_bench.py) emits the same fields for the same networks ----
if [[ -n "${NB_PYTHON:-}" && -x "${NB_PYTHON}" ]]; then
    if "$NB_PYTHON" "$tb" --model fcn-r,cnn --threads 1 "${tinier[@]}" --format json > p.txt 2> p.err &&
       "$nabla" bench --model fcn-r,cnn --threads 1 "${tinier[@]}" --format json > n.txt 2> n.err &&
       python3 - n.txt p.txt <<'PY'
import json, sys
nb, pt = ([json.loads(l) for l in open(f) if l.strip()] for f in sys.argv[1:3])
assert len(nb) == len(pt) == 2, (nb, pt)
for a, b in zip(nb, pt):
    assert (a["impl"], b["impl"]) == ("nabla", "pytorch"), (a, b)
    assert set(a) == set(b), set(a) ^ set(b)
    for k in ("model", "device", "threads", "batch", "iters", "warmup", "fwd_flops_per_sample", "params"):
        assert a[k] == b[k], (k, a[k], b[k])
PY
    then pass "torch_bench.py: same fields, shapes and parameter counts"
    else fail "torch_bench.py: $(cat p.txt p.err n.err 2>&1)"; fi
else
    fail "torch_bench.py: NB_PYTHON ('${NB_PYTHON:-}') is not an executable Python (scripts/setup.sh makes .venv)"
fi

# ---- usage errors: exit 2, one line ----
expect 2 'bench: unknown model "nope" in --model cnn,nope (known: fcn-s' "$nabla" bench --model cnn,nope
expect 2 'bench: unknown model "" in --model cnn,' "$nabla" bench --model cnn,
expect 2 'bench: --threads: expected' "$nabla" bench --model cnn --threads 1,,2
expect 2 '--threads: expected an integer >= 1, got "0"' "$nabla" bench --model cnn --threads 0
expect 2 'bench: --threads: expected' "$nabla" bench --model cnn --threads 2,x
expect 2 '--threads: expected an integer >= 1, got "1x"' "$nabla" bench --model cnn --threads 1x
expect 2 '--iters: expected an integer >= 1' "$nabla" bench --model cnn --iters 0
expect 2 '--warmup: expected an integer >= 0' "$nabla" bench --model cnn --warmup -1
expect 2 '--batch-size: expected an integer >= 1' "$nabla" bench --model cnn --batch-size 0
expect 2 'bench: unknown format "xml"' "$nabla" bench --model cnn --format xml
expect 2 'unknown option --epochs' "$nabla" bench --model cnn --epochs 1
expect 2 'bench: unknown --profile "gpu" (expected host or sync)' "$nabla" bench --model cnn --profile gpu

# ---- --profile: the per-op table on stderr, stdout untouched (one json line); one iteration of
# the zoo's cnn runs one optimizer step and one weight-gradient convolution per conv layer (two) ----
if "$nabla" bench --model cnn --threads 1 "${tinier[@]}" --format json --profile host > pj.txt 2> pe.txt &&
    [[ $(wc -l < pj.txt) -eq 1 ]] && grep -q '^cnn, 1 thread, 1 timed iterations (--profile host):' pe.txt &&
    grep -Eq '^conv2d_backward_weight +2 ' pe.txt && grep -Eq '^optimizer_step +1 ' pe.txt &&
    grep -q '^(not in ops)' pe.txt; then
    pass "--profile host: per-op table, $(grep -c . pe.txt) lines (cnn's two conv layers: 2 weight gradients)"
else
    fail "--profile host: $(head -c 600 pe.txt)"
fi
expect 2 'unknown device "tpu"' "$nabla" bench --model cnn --device tpu

# ---- --memory-format: a bad name is a usage error; channels_last gives the same first loss as
# contiguous (one iteration: the loss is the forward's, before any update) and says so in the JSON ----
expect 2 'bench: unknown --memory-format "nhwc" (expected contiguous or channels_last)' \
    "$nabla" bench --model cnn --memory-format nhwc
if "$nabla" bench --model resnet20,cnn --threads 1 "${tinier[@]}" --format json > mf0.txt &&
    "$nabla" bench --model resnet20,cnn --threads 1 "${tinier[@]}" --format json \
        --memory-format channels_last > mf1.txt &&
    [[ $(grep -c '"memory_format": "channels_last"' mf1.txt) -eq 2 ]] &&
    [[ $(grep -c '"memory_format": "contiguous"' mf0.txt) -eq 2 ]] &&
    paste -d'\n' mf0.txt mf1.txt | sed -E 's/.*"loss": ([^,}]*).*/\1/' | paste - - |
        awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-4 * ($1 < 0 ? -$1 : $1) + 1e-6) exit 1 }'; then
    pass "--memory-format channels_last: first losses equal contiguous's ($(sed -E 's/.*"loss": ([^,}]*).*/\1/' mf1.txt | tr '\n' ' '))"
else
    fail "--memory-format channels_last: $(cat mf0.txt mf1.txt | head -c 800)"
fi
# ---- --conv-algo: a bad name is a usage error; the JSON records the algorithm, from the flag or
# from NABLA_CONV_ALGO, and Winograd's first losses equal the direct ones (same forward, other
# rounding: ResNet-20's 3x3 convolutions have 16-64 channels) ----
expect 2 'bench: unknown --conv-algo "fft" (expected auto, direct or winograd)' \
    "$nabla" bench --model cnn --conv-algo fft
if "$nabla" bench --model resnet20 --threads 1 "${tinier[@]}" --format json --conv-algo direct > ca0.txt &&
    NABLA_CONV_ALGO=winograd "$nabla" bench --model resnet20 --threads 1 "${tinier[@]}" --format json > ca1.txt &&
    grep -q '"conv_algo": "direct"' ca0.txt && grep -q '"conv_algo": "winograd"' ca1.txt &&
    paste -d'\n' ca0.txt ca1.txt | sed -E 's/.*"loss": ([^,}]*).*/\1/' | paste - - |
        awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-4 * ($1 < 0 ? -$1 : $1) + 1e-6) exit 1 }'; then
    pass "--conv-algo: recorded; Winograd's first loss equals direct's ($(sed -E 's/.*"loss": ([^,}]*).*/\1/' ca0.txt ca1.txt | tr '\n' ' '))"
else
    fail "--conv-algo: $(cat ca0.txt ca1.txt | head -c 800)"
fi
# ---- warm-up while the CPU tuners time: FCN-R at batch 16 has products of 2^25 flops and more
# (gemm.c tunes them); a shape called once per iteration runs 7 calls on the tuner's schedule
# (the rules, then 6 timed on OpenBLAS, oneDNN and OpenBLAS transposed), 2 more where oneDNN's
# matmul primitive has its AVX-512 kernels (`nabla info`'s oneDNN isa from avx512_core), and 2
# more where nabla's own kernels run (with AVX-512 its NN kernel for few rows, the input gradients
# at batch 16, and its NT one; with AVX2 its NT kernel for few rows, the forward products at batch
# 16: `nabla info`'s cpu isa AVX-512 or AVX2), 2 more where nabla's AMX kernel
# runs (`nabla info`'s amx: on), so after 1 warm-up iteration
# bench adds the ones that still run on it and 1 that runs none. With the tuner off nothing is
# added. ----
tw_added=7
if "$nabla" info | grep -q 'onednn:.*isa avx512_core'; then tw_added=$((tw_added + 2)); fi
if "$nabla" info | grep -q -E 'cpu isa: *(AVX-512|AVX2)'; then tw_added=$((tw_added + 2)); fi
if "$nabla" info | grep -q 'amx: *on'; then tw_added=$((tw_added + 2)); fi
if NABLA_GEMM_TUNE=1 NABLA_CONV_TUNE=0 "$nabla" bench --model fcn-r --threads 1 --batch-size 16 --iters 1 --warmup 1 \
        --format json > tw1.txt 2> tw1.err &&
    NABLA_GEMM_TUNE=0 NABLA_CONV_TUNE=0 "$nabla" bench --model fcn-r --threads 1 --batch-size 16 --iters 1 --warmup 1 \
        > tw0.txt 2> tw0.err &&
    grep -qx "nabla bench: fcn-r, 1 thread: $tw_added more warm-up iterations while the CPU tuners timed" tw1.err &&
    grep -q "\"warmup\": 1, \"warmup_added\": $tw_added," tw1.txt && ! grep -q 'more warm-up' tw0.err; then
    pass "tuning warm-up: $(cat tw1.err), and in the JSON; none with the tuner off"
else
    fail "tuning warm-up (want $tw_added added): on: $(head -c 400 tw1.err) $(head -c 400 tw1.txt); off: $(head -c 400 tw0.err)"
fi
# ---- --step-in-backward: a bad value is a usage error; on, the losses after two updates equal
# those of the separate step (SGD with momentum and Adam: the same updates, made earlier), the
# JSON says so, and the LSTM, which clips its gradients after backward, is a row with the reason ----
expect 2 'bench: unknown --step-in-backward "yes" (expected on, off or auto)' \
    "$nabla" bench --model cnn --step-in-backward yes
if "$nabla" bench --model fcn-r,cnn --threads 1 "${tiny[@]}" --format json > sb0.txt 2> sb.err &&
    "$nabla" bench --model fcn-r,cnn --threads 1 "${tiny[@]}" --format json --step-in-backward on > sb1.txt 2>> sb.err &&
    [[ $(grep -c '"step_in_backward": true' sb1.txt) -eq 2 ]] && [[ $(grep -c '"step_in_backward": false' sb0.txt) -eq 2 ]] &&
    paste -d'\n' sb0.txt sb1.txt | sed -E 's/.*"loss": ([^,}]*).*/\1/' | paste - - |
        awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * ($1 < 0 ? -$1 : $1) + 1e-7) exit 1 }'; then
    pass "--step-in-backward on: losses after two updates equal the step's ($(sed -E 's/.*"loss": ([^,}]*).*/\1/' sb0.txt sb1.txt | tr '\n' ' '))"
else
    fail "--step-in-backward: $(cat sb0.txt sb1.txt | head -c 800)"
fi
"$nabla" bench --model lstm --threads 1 --batch-size 2 --iters 1 --warmup 0 --format json --step-in-backward on \
    > sbl.txt 2> sbl.err
rc=$?
if [[ $rc -eq 1 ]] && grep -q '"error": "lstm clips its gradients' sbl.txt && grep -q 'leaves no gradients for' sbl.err; then
    pass "--step-in-backward on: the LSTM's row says why it cannot run ($(head -c 200 sbl.err))"
else
    fail "--step-in-backward on with the LSTM: exit $rc, $(head -c 400 sbl.txt) $(head -c 400 sbl.err)"
fi
# auto: on for the networks that do not clip (fcn-r: the same loss as with off), off for the LSTM,
# which then runs
if "$nabla" bench --model fcn-r,lstm --threads 1 --batch-size 2 --iters 2 --warmup 1 --format json \
        --step-in-backward auto > sba.txt 2> sba.err &&
    grep '"model": "fcn-r"' sba.txt | grep -q '"step_in_backward": true' &&
    grep '"model": "lstm"' sba.txt | grep -q '"step_in_backward": false' && ! grep -q '"error"' sba.txt &&
    "$nabla" bench --model fcn-r --threads 1 --batch-size 2 --iters 2 --warmup 1 --format json > sbo.txt 2>> sba.err &&
    paste -d'\n' sbo.txt <(grep '"model": "fcn-r"' sba.txt) | sed -E 's/.*"loss": ([^,}]*).*/\1/' | paste - - |
        awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * ($1 < 0 ? -$1 : $1) + 1e-7) exit 1 }'; then
    pass "--step-in-backward auto: on for fcn-r (the same loss as off), off for the LSTM, which runs"
else
    fail "--step-in-backward auto: $(head -c 800 sba.txt) $(head -c 400 sba.err)"
fi
# ---- --cuda-graph: a bad value is a usage error; on the CPU, a row that says why it cannot run ----
expect 2 'bench: unknown --cuda-graph "1" (expected on or off)' "$nabla" bench --model cnn --cuda-graph 1
"$nabla" bench --model fcn-r --threads 1 --batch-size 2 --iters 1 --warmup 0 --format json --cuda-graph on \
    > cg.txt 2> cg.err
rc=$?
if [[ $rc -eq 1 ]] && grep -q '"cuda_graph": true' cg.txt && grep -q '"error": "fcn-r: cuda graphs need a CUDA device"' cg.txt &&
    grep -q 'cuda graphs need a CUDA device' cg.err; then
    pass "--cuda-graph on on the CPU: the row says why it cannot run ($(head -c 200 cg.err))"
else
    fail "--cuda-graph on on the CPU: exit $rc, $(head -c 400 cg.txt) $(head -c 400 cg.err)"
fi
# a list of threads is bench's alone
expect 2 '--threads: expected an integer >= 1, got "1,2"' "$nabla" train --model mlp --threads 1,2
if "$nabla" info | grep -Eq '^  cuda:[0-9]'; then
    echo "ok: (not checked) --device cuda's error: a GPU is present"
else
    expect 2 'bench: device_parse\|bench: device cuda:0' "$nabla" bench --model cnn --device cuda
fi

# ---- --data real: the loader's batches (a tiny CIFAR-10 made here; Fashion-MNIST when installed) ----
expect 2 'bench: unknown --data "bogus" (expected synthetic or real)' "$nabla" bench --model cnn --data bogus
mkdir -p cifar
python3 - cifar <<'PY'
import os, random, sys
random.seed(3)
for i in range(1, 6):  # CIFAR-10's binary batches: a label byte, then 3x32x32 pixel bytes, per record
    with open(os.path.join(sys.argv[1], f"data_batch_{i}.bin"), "wb") as f:
        for _ in range(4):
            f.write(bytes([random.randrange(10)] + [random.randrange(256) for _ in range(3072)]))
PY
if "$nabla" bench --model resnet20,alexnet-r --data real --data-dir cifar --threads 1 "${tinier[@]}" --format json \
    > r.txt 2> r.err && python3 - r.txt <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
assert [r["model"] for r in rows] == ["resnet20", "alexnet-r"], rows
for r in rows:
    assert r.get("median_s", 0) > 0 and r.get("error") is None, r
print("real CIFAR-10 batches:", ", ".join(f'{r["model"]} {r["median_s"]:.4f} s' for r in rows))
PY
then pass "--data real on CIFAR-10"; else fail "--data real on CIFAR-10: $(cat r.err r.txt | head -c 400)"; fi
"$nabla" bench --model resnet-56,lstm --data real --threads 1 "${tinier[@]}" --format json > r2.txt 2>&1
if grep -q '"resnet-56: --data real needs --data-dir with the CIFAR-10 binary batches"' r2.txt &&
   grep -q "\"lstm: --data real needs --data-dir with Penn Treebank's ptb.train.txt\"" r2.txt; then
    pass "--data real: rows it cannot run say why"
else fail "--data real errors: $(head -c 400 r2.txt)"; fi
# the LSTM on a small text in Penn Treebank's form; a text of more words than the model's 10,000
mkdir -p ptb ptb-big
python3 - ptb ptb-big <<'PY'
import os, random, sys
random.seed(5)
words = ["the", "<unk>", "N", "of", "a", "in", "to", "and", "'s", "for", "that", "$", "is", "market"]
with open(os.path.join(sys.argv[1], "ptb.train.txt"), "w") as f:
    for _ in range(60):
        f.write(" " + " ".join(random.choice(words) for _ in range(random.randrange(3, 20))) + " \n")
with open(os.path.join(sys.argv[2], "ptb.train.txt"), "w") as f:
    f.write(" ".join(f"w{i}" for i in range(10000)) + "\n")
PY
if "$nabla" bench --model lstm --data real --data-dir ptb --threads 1 --batch-size 4 --iters 3 --warmup 1 --format json \
    > r4.txt 2> r4.err && python3 - r4.txt <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
assert len(rows) == 1 and rows[0]["model"] == "lstm" and rows[0].get("error") is None, rows
# 14 words: a model that has learnt nothing yet is near ln(10000) = 9.2, far above ln(14) = 2.6
assert rows[0]["median_s"] > 0 and 2 < rows[0]["loss"] < 10, rows
print("real PTB-form batches: lstm", rows[0]["median_s"], "s, loss", rows[0]["loss"])
PY
then pass "--data real on a Penn Treebank text"; else fail "--data real on PTB: $(cat r4.err r4.txt | head -c 400)"; fi
"$nabla" bench --model lstm --data real --data-dir ptb-big --threads 1 "${tinier[@]}" --format json > r5.txt 2>&1
if grep -q "lstm: ptb.train.txt in --data-dir has 10001 words, more than the model's vocabulary of 10000" r5.txt; then
    pass "--data real: a text of too many words is refused"
else fail "--data real, too many words: $(head -c 400 r5.txt)"; fi
fm=/usr/share/datasets/fashion-mnist
if [[ -e $fm/train-images-idx3-ubyte.gz || -e $fm/train-images-idx3-ubyte ]]; then
    if "$nabla" bench --model fcn-r --data real --threads 1 "${tinier[@]}" --format json > r3.txt 2> r3.err &&
       grep -q '"median_s"' r3.txt; then pass "--data real on Fashion-MNIST"; else fail "fcn-r real: $(cat r3.err r3.txt)"; fi
else
    echo "ok: (not checked) Fashion-MNIST is not installed in $fm"
fi

echo "$failures failure(s)"
[[ $failures -eq 0 ]]
