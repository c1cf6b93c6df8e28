"""PyTorch's side of tests/test_torchfile.c: files torch.save writes for nabla to read, and checks
of the files nabla writes, read with torch.load(weights_only=True).

  torchfile_interop.py write DIR         torch.save files (and their expected contents) into DIR
  torchfile_interop.py check FILE REF KEYS   FILE (nabla's torch format) holds exactly the
                                         tensors of REF (nabla's safetensors), keys in the order of
                                         the comma-separated KEYS
  torchfile_interop.py shared FILE REF KEYS GROUPS   as check, and the tensors named in each
                                         ';'-separated group of GROUPS ('='-separated names)
                                         share one storage, distinct from every other group's
  torchfile_interop.py module DIR        nabla's cnn state dict DIR/nb_module.pt loads into
                                         cases_models.cnn and gives DIR/nb_module_io's output

Reference files are safetensors, written and read here by hand (the format is a JSON header and
the bytes), so that this runs in any torch (Debian's 1.13 in CI, a PyPI 2.x by hand) without the
safetensors package. Exit status 1, with the differences printed, on any mismatch.
"""
import collections
import inspect
import json
import os
import struct
import sys
import types
import warnings
import zipfile

import torch
import torch.nn as nn

CODES = {torch.float32: "F32", torch.float64: "F64", torch.float16: "F16", torch.bfloat16: "BF16",
         torch.int64: "I64", torch.int32: "I32", torch.uint8: "U8", torch.bool: "BOOL", torch.int16: "I16"}
DTYPES = {v: k for k, v in CODES.items()}


def raw(t):
    """A tensor's bytes, row-major."""
    t = t.detach().contiguous().reshape(-1)
    return bytes(t.view(torch.uint8).numpy().tobytes()) if t.numel() else b""


def save_st(tensors, path, metadata=None):
    header, data = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for k, t in tensors.items():
        b = raw(t)
        header[k] = {"dtype": CODES[t.dtype], "shape": list(t.shape), "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def load_st(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    header, data = json.loads(b[8:8 + n]), b[8 + n:]
    out = {}
    for k, e in header.items():
        if k == "__metadata__":
            continue
        lo, hi = e["data_offsets"]
        dt = DTYPES[e["dtype"]]
        if hi > lo:
            out[k] = torch.frombuffer(bytearray(data[lo:hi]), dtype=torch.uint8).view(dt).reshape(e["shape"])
        else:
            out[k] = torch.empty(e["shape"], dtype=dt)
    return out, header.get("__metadata__", {})


def flat(obj, prefix=""):
    """The tensors of obj under nabla's flattened names."""
    out = collections.OrderedDict()
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, (list, tuple)) else None
    for k, v in items:
        name = f"{prefix}{k}"
        if isinstance(v, torch.Tensor):
            out[name] = v
        elif isinstance(v, (dict, list, tuple)):
            out.update(flat(v, name + "."))
    return out


def small_module():
    torch.manual_seed(1)
    m = nn.Sequential(nn.Conv2d(2, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 3 * 3, 3))
    m(torch.randn(5, 2, 5, 5)).sum().backward()  # training mode: running statistics and num_batches_tracked move
    return m


def write(d):
    torch.manual_seed(0)
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    dtypes = collections.OrderedDict([
        ("f32", torch.randn(3, 4)),
        ("f64", torch.randn(2, 3, dtype=torch.float64)),
        ("f16", torch.tensor([0.5, -2.0, 65504.0, float("inf"), float("nan")], dtype=torch.float16)),
        ("bf16", torch.randn(2, 2).bfloat16()),
        ("i64", torch.tensor([-2**63, 2**63 - 1, 0, -1])),
        ("i32", torch.arange(-5, 5, dtype=torch.int32)),
        ("u8", torch.arange(0, 256, 7, dtype=torch.uint8)),
        ("bool", torch.tensor([True, False, True])),
        ("scalar", torch.tensor(2.5)),
        ("empty", torch.zeros(0, 3)),
    ])
    views = collections.OrderedDict([
        ("strided", base[:, 1:5:2]),      # non-contiguous, offset 1
        ("row", base[1]),                 # the same storage, offset 6
        ("corner", base[2:, 3:]),         # the same storage, offset 15
        ("transposed", torch.randn(3, 5).t()),
        ("expanded", torch.tensor([1.0, 2.0, 3.0]).expand(2, 3)),
        ("big", torch.randn(70000)[1:]),  # a storage numel past BININT2, offset 1
    ])
    m = small_module()
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    opt.step()
    obj = collections.OrderedDict([
        ("model", m.state_dict()),
        ("dtypes", dtypes),
        ("views", views),
        ("optim", opt.state_dict()),
        ("epoch", 3), ("lr", 0.001), ("tiny", 1e-8), ("big_int", 2**64 - 1), ("neg", -7),
        ("name", 'run "a"'), ("flag", True), ("nothing", None), ("betas", (0.9, 0.999)),
        ("params", [0, 1, 2]), ("layers", [torch.ones(2), torch.zeros(1)]), ("empty_dict", {}),
        ("dtype", torch.float32), ("shape", torch.Size([2, 3])),
    ])
    torch.save(obj, os.path.join(d, "py.pt"))
    tensors = flat(obj)
    save_st({k: v.clone() for k, v in tensors.items()}, os.path.join(d, "py_ref.safetensors"),
            {"order": ",".join(tensors)})
    # the same archive deflated, as a zip tool would re-pack it
    with zipfile.ZipFile(os.path.join(d, "py.pt")) as src, \
            zipfile.ZipFile(os.path.join(d, "py_deflated.pt"), "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info.filename))
    # a module's state dict alone, and its output in eval mode on one input
    m.eval()
    x = torch.randn(2, 2, 5, 5)
    torch.save(m.state_dict(), os.path.join(d, "py_module.pt"))
    save_st({"x": x, "y": m(x).detach()}, os.path.join(d, "py_module_io.safetensors"))
    write_bad(d)


def write_bad(d):
    torch.save({"s": torch.zeros(2, dtype=torch.int16)}, os.path.join(d, "bad_int16.pt"))
    mod = types.ModuleType("mymodule")

    class MyClass:
        pass
    MyClass.__module__, MyClass.__qualname__ = "mymodule", "MyClass"
    mod.MyClass = MyClass
    sys.modules["mymodule"] = mod
    torch.save({"w": torch.ones(2), "obj": MyClass()}, os.path.join(d, "bad_global.pt"))
    torch.save(torch.ones(2), os.path.join(d, "bad_top_tensor.pt"))
    torch.save({"x": torch.ones(2)}, os.path.join(d, "bad_legacy.pt"), _use_new_zipfile_serialization=False)
    with warnings.catch_warnings():  # torch 2.x deprecates TorchScript
        warnings.simplefilter("ignore")
        torch.jit.save(torch.jit.script(nn.Linear(2, 2)), os.path.join(d, "bad_script.pt"))
    torch.save({"a.b": torch.ones(1), "a": {"b": torch.zeros(1)}}, os.path.join(d, "bad_collide.pt"))
    # a deflated entry claiming far more bytes than its compressed data can hold
    with zipfile.ZipFile(os.path.join(d, "py_deflated.pt")) as z:
        names = [i.filename for i in z.infolist()]
    b = bytearray(open(os.path.join(d, "py_deflated.pt"), "rb").read())
    at = b.find(b"PK\x01\x02")
    while at >= 0:
        n = struct.unpack("<H", b[at + 28:at + 30])[0]
        if b[at + 46:at + 46 + n].endswith(b"/data/0"):
            b[at + 24:at + 28] = struct.pack("<I", 0xFFFFFFF0)
        at = b.find(b"PK\x01\x02", at + 4)
    open(os.path.join(d, "bad_deflate_size.pt"), "wb").write(bytes(b))
    assert names


def same(a, b):
    return a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape) and raw(a) == raw(b)


def check(path, ref, keys):
    errors = []
    want, _ = load_st(ref)
    loads = [("", {})]
    if "mmap" in inspect.signature(torch.load).parameters:
        loads.append((" (mmap=True)", {"mmap": True}))
    for how, kw in loads:
        got = torch.load(path, weights_only=True, **kw)
        if type(got) is not collections.OrderedDict:
            errors.append(f"{how}: a {type(got).__name__}, not an OrderedDict")
        names = [k for k, v in got.items() if isinstance(v, torch.Tensor)]
        if names != keys:
            errors.append(f"{how}: keys {names}, expected {keys}")
        for k in keys:
            g, w = got.get(k), want.get(k)
            if g is None or w is None or not same(g, w):
                errors.append(f"{how}: {k!r}: {None if g is None else (g.dtype, tuple(g.shape))} differs from "
                              f"{None if w is None else (w.dtype, tuple(w.shape))}")
        for k, v in got.items():
            if not isinstance(v, (torch.Tensor, str)):
                errors.append(f"{how}: {k!r} is a {type(v).__name__}")
    return errors


def storage_ptr(t):
    """Where t's storage starts (untyped_storage() since torch 2.0, storage() before)."""
    return t.untyped_storage().data_ptr() if hasattr(t, "untyped_storage") else t.storage().data_ptr()


def shared(path, ref, keys, groups):
    """check's errors, and those of tensors that should share memory and do not (or the reverse)."""
    errors = check(path, ref, keys)
    groups = [g.split("=") for g in groups.split(";")]
    loads = [("", {})]
    if "mmap" in inspect.signature(torch.load).parameters:
        loads.append((" (mmap=True)", {"mmap": True}))
    for how, kw in loads:
        got = torch.load(path, weights_only=True, **kw)
        ptrs = [{storage_ptr(got[k]) for k in g} for g in groups]
        for g, p in zip(groups, ptrs):
            if len(p) != 1:
                errors.append(f"{how}: {'/'.join(g)} are on {len(p)} storages, expected one")
        for i in range(len(groups)):
            for j in range(i):
                if ptrs[i] & ptrs[j] and got[groups[i][0]].numel() and got[groups[j][0]].numel():
                    errors.append(f"{how}: {groups[j][0]} and {groups[i][0]} share a storage")
        # and it is memory they share: adding to the first changes the others
        for g in groups:
            before = {k: got[k].clone() for k in g[1:]}
            got[g[0]].add_(1)
            for k in g[1:]:
                if torch.equal(got[k], before[k]):
                    errors.append(f"{how}: adding to {g[0]} left {k} as it was")
    return errors


def module(d):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import cases_models
    m = cases_models.cnn(1, 28, 28, 10)
    sd = torch.load(os.path.join(d, "nb_module.pt"), weights_only=True)
    m.load_state_dict(sd, strict=True)
    m.eval()
    io, _ = load_st(os.path.join(d, "nb_module_io.safetensors"))
    with torch.no_grad():
        y = m(io["x"])
    errors = []
    if not torch.allclose(y, io["y"], rtol=1e-4, atol=1e-5):
        errors.append(f"outputs differ by up to {(y - io['y']).abs().max().item()}")
    for k, v in sd.items():
        if k.endswith("num_batches_tracked") and (v.dtype != torch.int64 or v.item() != 2):
            errors.append(f"{k}: {v!r}, expected tensor(2) of int64")
    return errors


def main():
    mode = sys.argv[1]
    if mode == "write":
        write(sys.argv[2])
        errors = []
    elif mode == "check":
        errors = check(sys.argv[2], sys.argv[3], sys.argv[4].split(",") if sys.argv[4] else [])
    elif mode == "shared":
        errors = shared(sys.argv[2], sys.argv[3], sys.argv[4].split(","), sys.argv[5])
    else:
        errors = module(sys.argv[2])
    print("\n".join(errors) if errors else f"torchfile_interop {mode}: ok (torch {torch.__version__})")
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
