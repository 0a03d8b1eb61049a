#!/usr/bin/python3
"""An independent reference for what llama.cpp c392e5094 cannot run: a float64 numpy forward
pass of Llama-family decoders, written from the published definitions, that writes goldens
in the format of tests/data/arch/FORMAT.md ("lumen-arch-golden/1").

What it covers (read from the GGUF's metadata):
  * Llama / Mistral: RMSNorm, RoPE, grouped-query attention, SwiGLU MLP (Touvron et al. 2023;
    Mistral 7B, Jiang et al. 2023). GGUF "llama" files hold q/k rows in llama.cpp's
    interleaved order, so RoPE rotates dimension pairs (2i, 2i+1) by pos * base^(-2i/d).
  * Sliding-window attention ("<arch>.attention.sliding_window" = w, every layer, Mistral):
    query position q sees key positions k with q - w < k <= q.
  * SmolLM3's NoPE layers: every 4th layer (3, 7, ...) applies no rotary embedding.
  * Cross-layer KV sharing (CLA, Brandon et al. 2024; "<arch>.attention.kv_source_layers":
    -1 for a layer that computes and stores its K/V, j for one that attends over layer j's
    keys and values with its own queries; such a layer has no attn_k / attn_v weights).

Numerics: float64 everywhere, no rounding of K / V / Q / probabilities to f16, so the golden's
settings say kv_type "f32" and lumen is checked with an f32 KV cache. Teacher-forced like the
llama.cpp goldens: the prompt's rows from one pass over all its positions, then a greedy
continuation (argmax, lowest id on ties) one token at a time over a growing KV cache.

  /usr/bin/python3 tests/ref/arch_ref.py MODEL.gguf GOLDEN_WITH_PROMPT_IDS.json OUT.json
      [--n-predict 24] [--top-k 8] [--full-every 24]

Prompt token ids come from a llama.cpp golden of a model with the same vocabulary (the
reference has no tokenizer); text and ids are copied from it.
"""
import argparse
import hashlib
import json
import struct
import sys

import numpy as np

# ---- GGUF (the subset the test models use: metadata of every type, f32 tensors) ----

_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


class Gguf:
    def __init__(self, path):
        self.data = open(path, "rb").read()
        self.pos = 0
        if self._take(4) != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file")
        version, n_tensors, n_kv = struct.unpack("<IQQ", self._take(20))
        if version not in (2, 3):
            raise ValueError(f"{path}: GGUF version {version}")
        self.meta = {}
        for _ in range(n_kv):
            key = self._string()
            self.meta[key] = self._value(struct.unpack("<I", self._take(4))[0])
        infos = []
        for _ in range(n_tensors):
            name = self._string()
            n_dims = struct.unpack("<I", self._take(4))[0]
            ne = struct.unpack(f"<{n_dims}Q", self._take(8 * n_dims))
            ggml_type, offset = struct.unpack("<IQ", self._take(12))
            infos.append((name, ne, ggml_type, offset))
        align = self.meta.get("general.alignment", 32)
        base = (self.pos + align - 1) // align * align
        self.tensors = {}
        for name, ne, ggml_type, offset in infos:
            if ggml_type != 0:
                raise ValueError(f"tensor {name}: type {ggml_type} (the reference reads f32 only)")
            n = int(np.prod(ne))
            a = np.frombuffer(self.data, dtype="<f4", count=n, offset=base + offset).astype(np.float64)
            self.tensors[name] = a.reshape(tuple(reversed(ne)))  # [rows][ne0]: a matrix is [out][in]

    def _take(self, n):
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def _string(self):
        n = struct.unpack("<Q", self._take(8))[0]
        return self._take(n).decode("utf-8")

    def _value(self, t):
        if t in _SCALAR:
            fmt = _SCALAR[t]
            return struct.unpack(fmt, self._take(struct.calcsize(fmt)))[0]
        if t == 8:
            return self._string()
        if t == 9:
            et, n = struct.unpack("<IQ", self._take(12))
            return [self._value(et) for _ in range(n)]
        raise ValueError(f"GGUF value type {t}")


# ---- the model ----


class Model:
    def __init__(self, g):
        m, self.t = g.meta, g.tensors
        self.arch = a = m["general.architecture"]
        if a not in ("llama", "smollm3"):
            raise ValueError(f"architecture {a}: the reference covers llama (Mistral) and smollm3")
        self.n_layer = m[f"{a}.block_count"]
        self.n_head = m[f"{a}.attention.head_count"]
        self.n_kv_head = m.get(f"{a}.attention.head_count_kv", self.n_head)
        self.n_embd = m[f"{a}.embedding_length"]
        self.head_dim = m.get(f"{a}.attention.key_length", self.n_embd // self.n_head)
        self.eps = m[f"{a}.attention.layer_norm_rms_epsilon"]
        self.theta = m.get(f"{a}.rope.freq_base", 10000.0)
        self.window = m.get(f"{a}.attention.sliding_window", 0)
        self.kv_source = m.get(f"{a}.attention.kv_source_layers", [-1] * self.n_layer)
        self.rope_layers = [not (a == "smollm3" and (il + 1) % 4 == 0) for il in range(self.n_layer)]
        self.out = self.t.get("output.weight", self.t["token_embd.weight"])
        for il, j in enumerate(self.kv_source):
            if j >= 0 and (j >= il or self.kv_source[j] != -1):
                raise ValueError(f"kv_source_layers[{il}] = {j}: must name an earlier layer that stores K/V")

    def rms_norm(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def rope(self, x, positions):
        # x [T][heads][d]; interleaved pairs (2i, 2i+1), angle pos * theta^(-2i/d)
        d = x.shape[-1]
        freqs = self.theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
        ang = np.outer(positions, freqs)[:, None, :]
        c, s = np.cos(ang), np.sin(ang)
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = x0 * c - x1 * s
        out[..., 1::2] = x0 * s + x1 * c
        return out

    def forward(self, ids, pos0, cache):
        """Runs ids at positions pos0.. against cache (per storing layer: K, V lists of rows);
        returns logits [T][n_vocab]."""
        T, hd = len(ids), self.head_dim
        positions = np.arange(pos0, pos0 + T)
        x = self.t["token_embd.weight"][ids]
        for il in range(self.n_layer):
            p = f"blk.{il}."
            h = self.rms_norm(x, self.t[p + "attn_norm.weight"])
            q = (h @ self.t[p + "attn_q.weight"].T).reshape(T, self.n_head, hd)
            if self.rope_layers[il]:
                q = self.rope(q, positions)
            src = self.kv_source[il]
            if src < 0:  # this layer computes and stores its K/V
                k = (h @ self.t[p + "attn_k.weight"].T).reshape(T, self.n_kv_head, hd)
                v = (h @ self.t[p + "attn_v.weight"].T).reshape(T, self.n_kv_head, hd)
                if self.rope_layers[il]:
                    k = self.rope(k, positions)
                cache.setdefault(il, [np.zeros((0, self.n_kv_head, hd)), np.zeros((0, self.n_kv_head, hd))])
                cache[il][0] = np.concatenate([cache[il][0], k])
                cache[il][1] = np.concatenate([cache[il][1], v])
            K, V = cache[il if src < 0 else src]
            n_keys = K.shape[0]
            group = self.n_head // self.n_kv_head
            attn = np.zeros((T, self.n_head, hd))
            key_pos = np.arange(n_keys)
            for t in range(T):
                qp = positions[t]
                visible = key_pos <= qp
                if self.window > 0:
                    visible &= key_pos > qp - self.window
                for hh in range(self.n_head):
                    kh = hh // group
                    s = K[visible, kh, :] @ q[t, hh] / np.sqrt(hd)
                    w = np.exp(s - s.max())
                    attn[t, hh] = (w / w.sum()) @ V[visible, kh, :]
            x = x + attn.reshape(T, -1) @ self.t[p + "attn_output.weight"].T
            h = self.rms_norm(x, self.t[p + "ffn_norm.weight"])
            gate = h @ self.t[p + "ffn_gate.weight"].T
            up = h @ self.t[p + "ffn_up.weight"].T
            x = x + (gate / (1.0 + np.exp(-gate)) * up) @ self.t[p + "ffn_down.weight"].T
        return self.rms_norm(x, self.t["output_norm.weight"]) @ self.out.T


# ---- the golden ----


def num6(v):
    return float("%.6g" % v)


def row_json(pos, input_id, logits, top_k, full, phase):
    order = sorted(range(len(logits)), key=lambda i: (-logits[i], i))
    lse = logits.max() + np.log(np.exp(logits - logits.max()).sum())
    j = {"phase": phase, "pos": int(pos), "input_id": int(input_id), "argmax": order[0],
         "margin": num6(logits[order[0]] - logits[order[1]]), "logsumexp": num6(lse),
         "top": [[i, num6(logits[i])] for i in order[:top_k]]}
    if full:
        j["logits"] = [num6(v) for v in logits]
    return j


def run_prompt(model, prompt, a):
    ids = prompt["prompt_ids"]
    n = len(ids)
    cache = {}
    logits = model.forward(ids, 0, cache)
    is_full = lambda pos, last: last or (a.full_every > 0 and pos % a.full_every == a.full_every - 1)
    rows = [row_json(p, ids[p], logits[p], a.top_k, is_full(p, p == n - 1), "prompt") for p in range(n)]
    generated, last = [], logits[-1]
    for i in range(a.n_predict):
        best = int(np.argmax(last))  # first maximum: lowest id on ties
        generated.append(best)
        if i + 1 == a.n_predict:
            break
        last = model.forward([best], n + i, cache)[0]
        rows.append(row_json(n + i, best, last, a.top_k, is_full(n + i, i + 2 == a.n_predict), "decode"))
    return {"name": prompt["name"], "text": prompt["text"], "prompt_ids": ids, "n_prompt": n,
            "generated_ids": generated, "rows": rows}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("prompts_from", help="a golden.json whose prompts (text and ids) to use")
    ap.add_argument("out")
    ap.add_argument("--n-predict", type=int, default=24)
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--full-every", type=int, default=24)
    a = ap.parse_args()
    g = Gguf(a.model)
    model = Model(g)
    src = json.load(open(a.prompts_from))
    golden = {
        "format": "lumen-arch-golden/1",
        "model": {"file": a.model.rsplit("/", 1)[-1], "sha256": hashlib.sha256(g.data).hexdigest(),
                  "size_bytes": len(g.data), "arch": model.arch, "desc": "numpy reference",
                  "n_vocab": int(model.out.shape[0]), "n_ctx_train": g.meta.get(f"{model.arch}.context_length"),
                  "bos_id": g.meta.get("tokenizer.ggml.bos_token_id", -1),
                  "eos_id": g.meta.get("tokenizer.ggml.eos_token_id", -1), "add_bos": src["model"]["add_bos"]},
        "reference": {"implementation": "numpy (tests/ref/arch_ref.py)", "api": "float64, no f16 rounding",
                      "build": "numpy " + np.__version__, "backend": "CPU", "system_info": "",
                      "harness": "tests/ref/arch_ref.py", "prompts_from": src["reference"]["build"]},
        "settings": {"n_ctx": 512, "n_threads": 1, "flash_attn": False, "kv_type": "f32",
                     "prompt_eval": "one pass over the whole prompt, logits at every position",
                     "decode": "greedy (argmax, lowest id on ties), one token per pass",
                     "n_predict": a.n_predict, "top_k": a.top_k, "full_every": a.full_every},
        "prompts": [run_prompt(model, p, a) for p in src["prompts"]],
    }
    with open(a.out, "w") as f:
        f.write("{\n")
        keys = list(golden)
        for i, k in enumerate(keys):
            if k != "prompts":
                f.write(json.dumps(k) + ": " + json.dumps(golden[k], ensure_ascii=False) + (",\n" if i + 1 < len(keys) else "\n"))
                continue
            f.write('"prompts": [\n')
            for pi, p in enumerate(golden["prompts"]):
                f.write(" {" + ",\n  ".join(json.dumps(pk) + ": " + json.dumps(pv, ensure_ascii=False)
                                           for pk, pv in p.items() if pk != "rows"))
                f.write(',\n  "rows": [\n' + ",\n".join("   " + json.dumps(r) for r in p["rows"]) + "\n  ]}")
                f.write(",\n" if pi + 1 < len(golden["prompts"]) else "\n")
            f.write("]" + (",\n" if i + 1 < len(keys) else "\n"))
        f.write("}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
