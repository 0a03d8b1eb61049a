#!/usr/bin/python3
"""Checks the hf/ twins of tests/data/arch against llama.cpp's own converter.

Not run by the build or CI: a hand check of `lumen synth --format hf`. For every case with an
hf/ directory, llama.cpp's convert_hf_to_gguf.py turns the twin into a GGUF, and every tensor
of that GGUF must equal the case's model.gguf (same name, shape and f32 values) and every
"<arch>." key must hold the same value. So the twin is, by llama.cpp's reading, the same model
as the GGUF the goldens were made from: names, Gemma's norm offset, the q/k permutation,
LongRoPE factors.

The converter runs as llama.cpp ships it, with two changes made here at run time: it writes no
vocabulary (the twins carry no tokenizer files; the vocabulary is the GGUF's), and dtype names
that Debian's older torch lacks are aliased (unused: the twins are f32). It needs
/usr/bin/python3 with Debian's python3-numpy, python3-torch, python3-sentencepiece,
python3-yaml and python3-tqdm.

  /usr/bin/python3 tools/check_hf_twins.py --converter /work/peer/llama.cpp [CASE_DIR...]
  # qwen3, gemma3, smollm3: the newer converter of node-llama-cpp's llama.cpp bundle
  /usr/bin/python3 tools/check_hf_twins.py --converter /tmp/nlc/src tests/data/arch/qwen3
"""
import argparse
import importlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np


def read_gguf(path, gguf):
    r = gguf.GGUFReader(path)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    keys = {}
    for name, f in r.fields.items():
        if name.startswith(arch + "."):
            keys[name] = [float(x) for x in f.parts[f.data[0]]] if len(f.data) == 1 else None
            if f.types and f.types[0] == gguf.GGUFValueType.STRING:
                keys[name] = bytes(f.parts[-1]).decode()
    tensors = {t.name: np.array(t.data, dtype=np.float32).reshape(-1) for t in r.tensors}
    shapes = {t.name: list(t.shape) for t in r.tensors}
    return arch, keys, tensors, shapes


def convert(converter_dir, hf_dir, out_path):
    # The converter, with set_vocab made a no-op on every model class.
    code = f"""
import sys
sys.path.insert(0, {str(converter_dir)!r})
import torch
# Debian's torch 1.13 lacks dtypes the converter's tables name; the twins are f32 only.
for n in ('float8_e4m3fn', 'float8_e5m2', 'uint16', 'uint32', 'uint64'):
    if not hasattr(torch, n): setattr(torch, n, torch.float32)
# The older converter reads through the `safetensors` package (not in Debian 12): a minimal
# stand-in for the eager path it takes with --no-lazy (f32 tensors only).
import json, struct, types, numpy as np
class _SafeOpen:
    def __init__(self, path, framework='pt', device='cpu'):
        b = open(path, 'rb').read()
        n = struct.unpack('<Q', b[:8])[0]
        self.h = {{k: v for k, v in json.loads(b[8:8 + n]).items() if k != '__metadata__'}}
        self.b, self.base = b, 8 + n
    def __enter__(self): return self
    def __exit__(self, *a): return False
    def keys(self): return list(self.h.keys())
    def get_tensor(self, name):
        t = self.h[name]; s, e = t['data_offsets']
        assert t['dtype'] == 'F32'
        return torch.from_numpy(np.frombuffer(self.b[self.base + s:self.base + e], dtype=np.float32).copy().reshape(t['shape']))
sys.modules['safetensors'] = types.SimpleNamespace(safe_open=_SafeOpen)
# The newer converter asks transformers' AutoConfig first and falls back to reading
# config.json when that fails; Debian 12 has no transformers, so it always falls back.
try:
    import transformers  # noqa: F401
except ImportError:
    class _NoAutoConfig:
        @staticmethod
        def from_pretrained(*a, **k): raise RuntimeError('no transformers: read config.json')
    sys.modules['transformers'] = types.SimpleNamespace(AutoConfig=_NoAutoConfig)
sys.argv = ['convert_hf_to_gguf.py', {str(hf_dir)!r}, '--outtype', 'f32', '--no-lazy', '--outfile', {str(out_path)!r}]
import convert_hf_to_gguf as c
base = getattr(c, 'Model', None) or getattr(c, 'ModelBase', None)
if base is None:  # the newer converter keeps its classes in a package, imported on demand
    import conversion.base
    base = conversion.base.ModelBase
noop = lambda self, *a, **k: None
seen = set()
def patch(cls):
    # set_vocab and the _set_vocab_* helpers architectures call from their own set_vocab
    if cls in seen: return
    seen.add(cls)
    for attr in list(vars(cls)):
        if attr == 'set_vocab' or attr.startswith('_set_vocab'): setattr(cls, attr, noop)
    for sub in cls.__subclasses__(): patch(sub)
patch(base)
c.main()
"""
    subprocess.run([sys.executable, "-c", code], check=True, cwd=converter_dir, capture_output=True)


def check_case(case_dir, converter_dir, gguf):
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "converted.gguf"
        # A copy with a stand-in tokenizer.json that only says how many tokens there are: the
        # Gemma 3 converter trims embedding rows past the tokenizer's size.
        hf = Path(tmp) / "hf"
        shutil.copytree(case_dir / "hf", hf)
        n_vocab = json.load(open(hf / "config.json"))["vocab_size"]
        json.dump({"model": {"vocab": {f"t{i}": i for i in range(n_vocab)}}, "added_tokens": []},
                  open(hf / "tokenizer.json", "w"))
        convert(converter_dir, hf, out)
        arch, keys_ref, t_ref, s_ref = read_gguf(str(case_dir / "model.gguf"), gguf)
        arch2, keys_conv, t_conv, s_conv = read_gguf(str(out), gguf)
    problems = []
    # Keys a converter may leave out because the value is llama.cpp's default.
    head_dim = keys_ref.get(arch + ".attention.key_length", [keys_ref[arch + ".embedding_length"][0] /
                                                           keys_ref[arch + ".attention.head_count"][0]])[0]
    defaults = {arch + ".rope.freq_base": 10000.0, arch + ".rope.dimension_count": head_dim}
    if arch != arch2:
        problems.append(f"architecture {arch2} != {arch}")
    for k, v in keys_ref.items():
        if k.endswith(".vocab_size"):
            continue  # written with the vocabulary
        if k not in keys_conv:
            if not (k in defaults and isinstance(v, list) and v[0] == defaults[k]):
                problems.append(f"converter wrote no {k}")
        elif isinstance(v, list) and not np.allclose(v, keys_conv[k], rtol=1e-6):
            problems.append(f"{k}: {keys_conv[k]} != {v}")
        elif isinstance(v, str) and v != keys_conv[k]:
            problems.append(f"{k}: {keys_conv[k]} != {v}")
    for name, x in t_ref.items():
        if name not in t_conv:
            problems.append(f"converter wrote no tensor {name}")
            continue
        if s_ref[name] != s_conv[name]:
            problems.append(f"{name}: shape {s_conv[name]} != {s_ref[name]}")
            continue
        d = float(np.max(np.abs(x - t_conv[name])))
        if d > 1e-6:
            problems.append(f"{name}: max |diff| {d:.3g}")
    extra = sorted(set(t_conv) - set(t_ref))
    if extra:
        problems.append(f"extra tensors {extra}")
    return arch, len(t_ref), problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--converter", required=True, help="a llama.cpp source tree (convert_hf_to_gguf.py, gguf-py)")
    ap.add_argument("cases", nargs="*")
    a = ap.parse_args()
    conv = Path(a.converter).resolve()
    sys.path.insert(0, str(conv / "gguf-py"))
    gguf = importlib.import_module("gguf")
    root = Path(__file__).resolve().parent.parent / "tests" / "data" / "arch"
    cases = [Path(c) for c in a.cases] or sorted(p for p in root.iterdir() if (p / "hf" / "config.json").exists())
    n_bad = 0
    for case in cases:
        try:
            arch, n, problems = check_case(case.resolve(), conv, gguf)
        except subprocess.CalledProcessError as e:
            print(f"{case.name}: the converter failed: {e.stderr.decode()[-400:]}")
            n_bad += 1
            continue
        print(f"{case.name} ({arch}): {n} tensors, " + ("same as model.gguf" if not problems else "; ".join(problems)))
        n_bad += bool(problems)
    print(f"{len(cases) - n_bad} passed, {n_bad} failed")
    return 1 if n_bad else 0


if __name__ == "__main__":
    sys.exit(main())
