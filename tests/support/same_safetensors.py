"""Whether two safetensors files hold bit-identical tensors (the same names, dtypes, shapes and
bytes); with KEY=VALUE arguments, also the same metadata, holding those values. Prints what it
compared; exits non-zero with the first difference. The command-line tests' resume checks.

usage: same_safetensors.py A B [KEY=VALUE ...]
"""
import sys

from safetensors import safe_open
from safetensors.torch import load_file

a_path, b_path, wants = sys.argv[1], sys.argv[2], sys.argv[3:]
a, b = load_file(a_path), load_file(b_path)
assert a.keys() == b.keys(), (sorted(a), sorted(b))
for k in a:
    assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
    assert a[k].numpy().tobytes() == b[k].numpy().tobytes(), "differs: " + k
said = f"{len(a)} tensors bit-identical"
if wants:
    ma, mb = safe_open(a_path, "pt").metadata(), safe_open(b_path, "pt").metadata()
    assert ma == mb, (ma, mb)
    for kv in wants:
        key, value = kv.split("=", 1)
        assert ma.get(key) == value, (key, ma.get(key), value)
    said += ", and the metadata (" + ", ".join(wants) + ")"
print(said)
