#!/usr/bin/python3
"""An independent reference for what llama.cpp c392e5094 cannot run: a float64 numpy forward
pass of Llama-family decoders, written from the published definitions, that writes goldens
in the format of tests/data/arch/FORMAT.md ("lumen-arch-golden/1").

What it covers (read from the GGUF's metadata and which tensors the file has):
  * Llama / Mistral: RMSNorm, RoPE, grouped-query attention, SwiGLU MLP (Touvron et al. 2023;
    Mistral 7B, Jiang et al. 2023). GGUF "llama" files hold q/k rows in llama.cpp's
    interleaved order, so RoPE rotates dimension pairs (2i, 2i+1) by pos * base^(-2i/d).
  * Sliding-window attention ("<arch>.attention.sliding_window" = w, every layer, Mistral):
    query position q sees key positions k with q - w < k <= q.
  * SmolLM3's NoPE layers: every 4th layer (3, 7, ...) applies no rotary embedding.
  * Cross-layer KV sharing (CLA, Brandon et al. 2024; "<arch>.attention.kv_source_layers":
    -1 for a layer that computes and stores its K/V, j for one that attends over layer j's
    keys and values with its own queries; such a layer has no attn_k / attn_v weights).
  * Mixtures of experts in a llama file (Mixtral, Jiang et al. 2024): softmax router over
    every expert, the top "<arch>.expert_used_count", their weights renormalised.
  * Qwen3 (Qwen3 technical report, 2025): RMSNorm of each q and k head before RoPE, head size
    "attention.key_length"; q/k rows as Hugging Face has them, so RoPE rotates the pairs
    (i, i + d/2) (NeoX style). Qwen3-MoE: the same attention, Mixtral's router (renormalised
    unless "<arch>.expert_weights_norm" says not), no shared expert.
  * Gemma 2 (Gemma Team 2024): embeddings times sqrt(hidden), GELU (tanh) gated MLP, the
    attention and MLP outputs RMS-normed before their residual adds (post_attention_norm,
    post_ffw_norm), attention scores and final logits soft-capped as c tanh(x / c)
    ("attn_logit_softcapping", default 50; "final_logit_softcapping", default 30), even
    layers sliding (window default 4096), q scaled by 1/sqrt(query_pre_attn_scalar) = the
    head size (n_embd / n_head for the 27B shapes: Gemma 2's 46 layers, Gemma 3's 62). Norm
    weights are used as the
    file has them: llama.cpp's converter already added Gemma's 1.
  * Gemma 3 (Gemma Team 2025): as Gemma 2 with q/k head norms instead of soft-caps (a final
    cap only if the file has the key), five local layers to one global (layer il slides
    iff il % 6 < 5; none without a window), the local layers' RoPE base
    "rope.freq_base_swa" (default 10000). "attention.sliding_window_pattern" (a period or
    per-layer flags) overrides either pattern.

Numerics: float64 everywhere, no rounding of K / V / Q / probabilities to f16, so the golden's
settings say kv_type "f32" and lumen is checked with an f32 KV cache. Two flags round as ggml
does instead, to compare with llama.cpp's own goldens or isolate a difference: --f16-kv (K, V,
q and the attention probabilities in f16, as an f16 KV cache; kv_type "f16") and
--gelu-f16-table (GELU through ggml-cpu's f16 lookup table, which lumen also uses: it turns
f32-level differences of the gate into steps of one f16 ulp). Teacher-forced like the
llama.cpp goldens: the prompt's rows from one pass over all its positions, then a greedy
continuation (argmax, lowest id on ties) one token at a time over a growing KV cache.

  /usr/bin/python3 tests/ref/arch_ref.py MODEL.gguf GOLDEN_WITH_PROMPT_IDS.json OUT.json
      [--n-predict 24] [--top-k 8] [--full-every 24] [--f16-kv] [--gelu-f16-table]

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

_NEOX = ("qwen3", "qwen3moe", "gemma2", "gemma3")  # rotate (i, i + n_rot/2): no q/k row permutation in the file
_ARCHES = ("llama", "smollm3") + _NEOX


def _f16(x):
    return np.asarray(x, dtype=np.float16).astype(np.float64)


class Model:
    def __init__(self, g, f16_kv=False, gelu_f16_table=False):
        m, self.t = g.meta, g.tensors
        self.f16_kv, self.gelu_f16_table = f16_kv, gelu_f16_table
        self.arch = a = m["general.architecture"]
        if a not in _ARCHES:
            raise ValueError(f"architecture {a}: the reference covers {', '.join(_ARCHES)}")
        gemma = a.startswith("gemma")
        self.n_layer = L = m[f"{a}.block_count"]
        self.n_head = m[f"{a}.attention.head_count"]
        self.n_kv_head = m.get(f"{a}.attention.head_count_kv", self.n_head)
        self.n_embd = m[f"{a}.embedding_length"]
        self.head_dim = m.get(f"{a}.attention.key_length", self.n_embd // self.n_head)
        if m.get(f"{a}.attention.value_length", self.head_dim) != self.head_dim:
            raise ValueError("attention.value_length != key_length")
        self.n_rot = m.get(f"{a}.rope.dimension_count", self.head_dim)
        self.neox = a in _NEOX
        self.eps = m[f"{a}.attention.layer_norm_rms_epsilon"]
        self.embd_scale = np.sqrt(self.n_embd) if gemma else 1.0
        self.gelu = gemma
        # Sliding windows: Mistral on every layer; Gemma 2 on even layers (period 2), Gemma 3 on
        # five of six (period 6): layer il slides iff il % period < period - 1. A file's
        # attention.sliding_window_pattern (a period, or one flag per layer) says otherwise.
        self.window = m.get(f"{a}.attention.sliding_window", 4096 if a == "gemma2" else 0)
        pattern = m.get(f"{a}.attention.sliding_window_pattern", {"gemma2": 2, "gemma3": 6}.get(a, 1))
        if isinstance(pattern, list):
            self.slides = [self.window > 0 and f != 0 for f in pattern]
        else:
            self.slides = [self.window > 0 and (pattern == 1 or il % pattern < pattern - 1) for il in range(L)]
        # RoPE base per layer: Gemma 3's local layers have their own (10000 unless the file says).
        theta = m.get(f"{a}.rope.freq_base", 10000.0)
        theta_local = m.get(f"{a}.rope.freq_base_swa", 10000.0) if a == "gemma3" else theta
        self.theta = [theta_local if self.slides[il] else theta for il in range(L)]
        # Query scale 1/sqrt(query_pre_attn_scalar): the head size, but n_embd / n_head for Gemma 2 27B
        # (46 layers) and Gemma 3 27B (62 layers), the ones whose published configs differ.
        qpas = self.head_dim
        if (a, L) in (("gemma2", 46), ("gemma3", 62)):
            qpas = self.n_embd // self.n_head
        self.attn_scale = m.get(f"{a}.attention.scale", 1.0 / np.sqrt(qpas))
        # Soft-capping c * tanh(x / c): Gemma 2's attention scores (default 50) and final logits
        # (default 30); Gemma 3 caps its logits only if the file says so.
        self.attn_softcap = m.get(f"{a}.attn_logit_softcapping", 50.0) if a == "gemma2" else 0.0
        self.final_softcap = m.get(f"{a}.final_logit_softcapping", 30.0 if a == "gemma2" else 0.0) if gemma else 0.0
        # Mixtures of experts: softmax over every expert, the top k, their weights renormalised
        # to sum 1 (Mixtral, Qwen3-MoE; expert_weights_norm says otherwise), scaled by
        # expert_weights_scale if the file has it.
        self.n_expert_used = m.get(f"{a}.expert_used_count", 0)
        self.expert_norm = bool(m.get(f"{a}.expert_weights_norm", a in ("llama", "qwen3moe")))
        self.expert_scale = m.get(f"{a}.expert_weights_scale", 0.0)
        self.kv_source = m.get(f"{a}.attention.kv_source_layers", [-1] * L)
        self.rope_layers = [not (a == "smollm3" and (il + 1) % 4 == 0) for il in range(L)]
        self.out = self.t.get("output.weight", self.t["token_embd.weight"])
        for il, j in enumerate(self.kv_source):
            if j >= 0 and (j >= il or self.kv_source[j] != -1):
                raise ValueError(f"kv_source_layers[{il}] = {j}: must name an earlier layer that stores K/V")

    def rms_norm(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def rope(self, x, positions, theta):
        # x [T][heads][d]; the first n_rot dims rotate, pair i by the angle pos * theta^(-2i/n_rot):
        # pairs (2i, 2i+1) in GGUF "llama" files (q/k rows interleaved by the converter), pairs
        # (i, i + n_rot/2) for the NeoX-style architectures (rows as Hugging Face has them).
        n = self.n_rot
        freqs = theta ** (-np.arange(0, n, 2, dtype=np.float64) / n)
        ang = np.outer(positions, freqs)[:, None, :]
        c, s = np.cos(ang), np.sin(ang)
        i0, i1 = (np.arange(0, n // 2), np.arange(n // 2, n)) if self.neox else (np.arange(0, n, 2), np.arange(1, n, 2))
        out = x.copy()
        x0, x1 = x[..., i0], x[..., i1]
        out[..., i0] = x0 * c - x1 * s
        out[..., i1] = x0 * s + x1 * c
        return out

    def act(self, g):
        if not self.gelu:
            return g / (1.0 + np.exp(-g))  # SiLU
        gelu = lambda x: 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))  # tanh approximation
        if not self.gelu_f16_table:
            return gelu(g)
        # ggml-cpu's table: fp16(gelu(fp16(x))) for -10 < x < 10, x from 10 up, 0 from -10 down
        return np.where(g >= 10, g, np.where(g <= -10, 0.0, _f16(gelu(_f16(g)))))

    def mlp(self, h, p):
        if p + "ffn_gate_inp.weight" not in self.t:
            gate = h @ self.t[p + "ffn_gate.weight"].T
            return (self.act(gate) * (h @ self.t[p + "ffn_up.weight"].T)) @ self.t[p + "ffn_down.weight"].T
        r = h @ self.t[p + "ffn_gate_inp.weight"].T  # [T][n_expert] router logits
        probs = np.exp(r - r.max(axis=-1, keepdims=True))
        probs /= probs.sum(axis=-1, keepdims=True)
        out = np.zeros_like(h)
        for t in range(h.shape[0]):
            chosen = sorted(range(probs.shape[1]), key=lambda e: (-probs[t, e], e))[:self.n_expert_used]
            w = probs[t, chosen]
            if self.expert_norm:
                w = w / w.sum()
            if self.expert_scale:
                w = w * self.expert_scale
            for e, we in zip(chosen, w):
                gate = self.t[p + "ffn_gate_exps.weight"][e] @ h[t]
                up = self.t[p + "ffn_up_exps.weight"][e] @ h[t]
                out[t] += we * (self.t[p + "ffn_down_exps.weight"][e] @ (self.act(gate) * up))
        return out

    def forward(self, ids, pos0, cache):
        """Runs ids at positions pos0.. against cache (per storing layer: K, V lists of rows);
        returns logits [T][n_vocab]."""
        T, hd = len(ids), self.head_dim
        positions = np.arange(pos0, pos0 + T)
        x = self.t["token_embd.weight"][ids] * self.embd_scale
        q_scale = self.attn_scale if self.arch.startswith("gemma") else 1.0  # llama.cpp scales Gemma's q itself
        for il in range(self.n_layer):
            p = f"blk.{il}."
            h = self.rms_norm(x, self.t[p + "attn_norm.weight"])
            q = (h @ self.t[p + "attn_q.weight"].T).reshape(T, self.n_head, hd)
            if p + "attn_q_norm.weight" in self.t:  # per-head RMSNorm of q and k, before RoPE
                q = self.rms_norm(q, self.t[p + "attn_q_norm.weight"])
            if self.rope_layers[il]:
                q = self.rope(q, positions, self.theta[il])
            src = self.kv_source[il]
            if src < 0:  # this layer computes and stores its K/V
                k = (h @ self.t[p + "attn_k.weight"].T).reshape(T, self.n_kv_head, hd)
                v = (h @ self.t[p + "attn_v.weight"].T).reshape(T, self.n_kv_head, hd)
                if p + "attn_k_norm.weight" in self.t:
                    k = self.rms_norm(k, self.t[p + "attn_k_norm.weight"])
                if self.rope_layers[il]:
                    k = self.rope(k, positions, self.theta[il])
                cache.setdefault(il, [np.zeros((0, self.n_kv_head, hd)), np.zeros((0, self.n_kv_head, hd))])
                if self.f16_kv:
                    k, v = _f16(k), _f16(v)
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
                if self.slides[il]:
                    visible &= key_pos > qp - self.window
                for hh in range(self.n_head):
                    kh = hh // group
                    qh = q[t, hh] * q_scale
                    if self.f16_kv:  # ggml multiplies f16 K by q rounded to f16
                        qh = _f16(qh)
                    s = K[visible, kh, :] @ qh * (self.attn_scale / q_scale)
                    if self.attn_softcap:
                        s = self.attn_softcap * np.tanh(s / self.attn_softcap)
                    w = np.exp(s - s.max())
                    w = w / w.sum()
                    if self.f16_kv:  # and f16 V by the probabilities rounded to f16
                        w = _f16(w)
                    attn[t, hh] = w @ V[visible, kh, :]
            o = attn.reshape(T, -1) @ self.t[p + "attn_output.weight"].T
            if p + "post_attention_norm.weight" in self.t:  # Gemma 2 / 3: the branch's output normed
                o = self.rms_norm(o, self.t[p + "post_attention_norm.weight"])
            x = x + o
            f = self.mlp(self.rms_norm(x, self.t[p + "ffn_norm.weight"]), p)
            if p + "post_ffw_norm.weight" in self.t:
                f = self.rms_norm(f, self.t[p + "post_ffw_norm.weight"])
            x = x + f
        logits = self.rms_norm(x, self.t["output_norm.weight"]) @ self.out.T
        if self.final_softcap:
            logits = self.final_softcap * np.tanh(logits / self.final_softcap)
        return logits


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
    ap.add_argument("--f16-kv", action="store_true",
                    help="round K, V, q and the attention probabilities to f16 as ggml does with an f16 KV cache")
    ap.add_argument("--gelu-f16-table", action="store_true", help="GELU through ggml-cpu's f16 table")
    a = ap.parse_args()
    g = Gguf(a.model)
    model = Model(g, a.f16_kv, a.gelu_f16_table)
    src = json.load(open(a.prompts_from))
    numerics = "float64, " + ("K, V, q, probabilities rounded to f16 as ggml's" if a.f16_kv else "no f16 rounding")
    if a.gelu_f16_table and model.gelu:
        numerics += "; GELU through ggml-cpu's f16 table"
    golden = {
        "format": "lumen-arch-golden/1",
        "model": {"file": a.model.rsplit("/", 1)[-1], "sha256": hashlib.sha256(g.data).hexdigest(),
                  "size_bytes": len(g.data), "arch": model.arch, "desc": "numpy reference",
                  "n_vocab": int(model.out.shape[0]), "n_ctx_train": g.meta.get(f"{model.arch}.context_length"),
                  "bos_id": g.meta.get("tokenizer.ggml.bos_token_id", -1),
                  "eos_id": g.meta.get("tokenizer.ggml.eos_token_id", -1), "add_bos": src["model"]["add_bos"]},
        "reference": {"implementation": "numpy (tests/ref/arch_ref.py)", "api": numerics,
                      "build": "numpy " + np.__version__, "backend": "CPU", "system_info": "",
                      "harness": "tests/ref/arch_ref.py", "prompts_from": src["reference"]["build"]},
        "settings": {"n_ctx": 512, "n_threads": 1, "flash_attn": False, "kv_type": "f16" if a.f16_kv else "f32",
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
