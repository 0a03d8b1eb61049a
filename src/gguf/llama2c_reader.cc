// llama2.c legacy checkpoint (+ tokenizer.bin) -> ModelFile with GGUF names and metadata.
//
// Checkpoint layout (run.c's "version 0" export; little-endian):
//
//   i32 dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len   (28 bytes)
//   f32 token_embedding [vocab][dim]           -> token_embd.weight      ne {dim, vocab}
//   f32 rms_att         [layer][dim]           -> blk.N.attn_norm.weight ne {dim}
//   f32 wq              [layer][dim][dim]      -> blk.N.attn_q.weight    ne {dim, dim}
//   f32 wk              [layer][kv_dim][dim]   -> blk.N.attn_k.weight    ne {dim, kv_dim}
//   f32 wv              [layer][kv_dim][dim]   -> blk.N.attn_v.weight    ne {dim, kv_dim}
//   f32 wo              [layer][dim][dim]      -> blk.N.attn_output.weight
//   f32 rms_ffn         [layer][dim]           -> blk.N.ffn_norm.weight
//   f32 w1              [layer][hidden][dim]   -> blk.N.ffn_gate.weight  ne {dim, hidden}
//   f32 w2              [layer][dim][hidden]   -> blk.N.ffn_down.weight  ne {hidden, dim}
//   f32 w3              [layer][hidden][dim]   -> blk.N.ffn_up.weight    ne {dim, hidden}
//   f32 rms_final       [dim]                  -> output_norm.weight
//   f32 freq_cis_real   [seq_len][head_size/2]    (unused: lumen computes RoPE itself)
//   f32 freq_cis_imag   [seq_len][head_size/2]
//   f32 wcls            [vocab][dim]           -> output.weight, only when vocab_size < 0
//
// Every tensor is a zero-copy view into the mmap (per-layer slices of the stacked arrays;
// they are 4-byte aligned, not 32-byte aligned). wq / wk are exposed exactly as stored:
// llama2.c's export keeps q/k in the interleaved RoPE pair layout (pairs (2i, 2i+1) of each
// head), which is GGML's "normal" RoPE layout, so they need no permutation. Checked
// against stories260K.gguf made by llama.cpp's convert-llama2c: every tensor is
// bit-identical, wq/wk included (see llama2c_reader_test.cc).
//
// tokenizer.bin: i32 max_token_length, then per token { f32 score, i32 len, len bytes }.
// Translated as llama.cpp's convert-llama2c does: ids 0/1/2 become "<unk>"/"<s>"/"</s>"
// (llama2.c stores "\n<s>\n" and "\n</s>\n"), ' ' becomes U+2581 '▁', and token types are
// <unk> = 2, <s>/</s> = 3, "<0xXX>" = 6 (byte), empty = 3, else 1.
#include <sys/stat.h>

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gguf/gguf_util.h"
#include "gguf/model_file.h"

namespace lumen::gguf {
namespace {

constexpr size_t kHeaderBytes = 7 * sizeof(int32_t);
// Sanity limits: far above any llama2.c model, far below overflow.
constexpr int64_t kMaxDim = 1 << 16;
constexpr int64_t kMaxHidden = 1 << 18;
constexpr int64_t kMaxLayers = 1 << 10;
constexpr int64_t kMaxHeads = 1 << 10;
constexpr int64_t kMaxVocab = 1 << 22;
constexpr int64_t kMaxSeqLen = 1 << 22;

struct Llama2cConfig {
  int64_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
  bool shared_classifier;
  int64_t head_size() const { return dim / n_heads; }
  int64_t kv_dim() const { return dim / n_heads * n_kv_heads; }
};

Status fail(const std::string& path, const std::string& msg) {
  return error("llama2c: " + msg + " (in '" + path + "')");
}

Result<Llama2cConfig> read_config(std::span<const std::byte> bytes, const std::string& path) {
  if (bytes.size() < kHeaderBytes)
    return fail(path, "file too small (" + std::to_string(bytes.size()) + " bytes) for the 28-byte header");
  int32_t h[7];
  std::memcpy(h, bytes.data(), kHeaderBytes);
  Llama2cConfig c{};
  c.dim = h[0];
  c.hidden_dim = h[1];
  c.n_layers = h[2];
  c.n_heads = h[3];
  c.n_kv_heads = h[4];
  c.shared_classifier = h[5] > 0;
  c.vocab_size = h[5] < 0 ? -int64_t{h[5]} : int64_t{h[5]};
  c.seq_len = h[6];
  struct Field { const char* name; int64_t value; int64_t max; };
  const Field fields[] = {{"dim", c.dim, kMaxDim},           {"hidden_dim", c.hidden_dim, kMaxHidden},
                          {"n_layers", c.n_layers, kMaxLayers}, {"n_heads", c.n_heads, kMaxHeads},
                          {"n_kv_heads", c.n_kv_heads, kMaxHeads}, {"vocab_size", c.vocab_size, kMaxVocab},
                          {"seq_len", c.seq_len, kMaxSeqLen}};
  for (const Field& f : fields) {
    if (f.value <= 0 || f.value > f.max)
      return fail(path, std::string("header field ") + f.name + " = " + std::to_string(f.value) +
                            " is out of range [1, " + std::to_string(f.max) + "]" +
                            " (is this a llama2.c checkpoint?)");
  }
  if (c.dim % c.n_heads != 0)
    return fail(path, "dim " + std::to_string(c.dim) + " is not a multiple of n_heads " + std::to_string(c.n_heads));
  if (c.n_heads % c.n_kv_heads != 0)
    return fail(path, "n_heads " + std::to_string(c.n_heads) + " is not a multiple of n_kv_heads " +
                          std::to_string(c.n_kv_heads));
  if (c.head_size() % 2 != 0)
    return fail(path, "head size " + std::to_string(c.head_size()) + " is odd (RoPE rotates pairs)");
  return c;
}

// A run of consecutive f32 arrays in the checkpoint, consumed front to back.
class F32Cursor {
 public:
  F32Cursor(const std::byte* base, uint64_t offset) : base_(base), offset_(offset) {}
  // Consumes n_floats and returns the byte offset where they start.
  uint64_t take(uint64_t n_floats) {
    const uint64_t at = offset_;
    offset_ += n_floats * sizeof(float);
    return at;
  }
  uint64_t offset() const { return offset_; }
  const std::byte* at(uint64_t offset) const { return base_ + offset; }

 private:
  const std::byte* base_;
  uint64_t offset_;
};

void add_f32(ModelFile* file, std::string name, const std::byte* data, int64_t ne0, int64_t ne1) {
  TensorInfo t;
  t.name = std::move(name);
  t.view.dtype = DType::kF32;
  t.view.n_dims = ne1 == 1 ? 1 : 2;
  t.view.ne[0] = ne0;
  t.view.ne[1] = ne1;
  t.view.data = data;
  t.view.n_bytes = static_cast<size_t>(ne0 * ne1) * sizeof(float);
  file->add_tensor(std::move(t));
}

Status add_tensors(const Llama2cConfig& c, std::span<const std::byte> bytes, const std::string& path,
                   ModelFile* file) {
  // The limits above keep every product below 2^63 (dim * hidden * layers * 4 < 2^48).
  const int64_t dim = c.dim, hidden = c.hidden_dim, kv_dim = c.kv_dim(), n_layers = c.n_layers;
  F32Cursor cur(bytes.data(), kHeaderBytes);
  const uint64_t emb = cur.take(c.vocab_size * dim);
  const uint64_t rms_att = cur.take(n_layers * dim);
  const uint64_t wq = cur.take(n_layers * dim * dim);
  const uint64_t wk = cur.take(n_layers * kv_dim * dim);
  const uint64_t wv = cur.take(n_layers * kv_dim * dim);
  const uint64_t wo = cur.take(n_layers * dim * dim);
  const uint64_t rms_ffn = cur.take(n_layers * dim);
  const uint64_t w1 = cur.take(n_layers * hidden * dim);
  const uint64_t w2 = cur.take(n_layers * dim * hidden);
  const uint64_t w3 = cur.take(n_layers * hidden * dim);
  const uint64_t rms_final = cur.take(dim);
  cur.take(c.seq_len * c.head_size() / 2);  // freq_cis_real
  cur.take(c.seq_len * c.head_size() / 2);  // freq_cis_imag
  const uint64_t wcls = cur.take(c.shared_classifier ? 0 : c.vocab_size * dim);
  const uint64_t expected = cur.offset();
  if (bytes.size() != expected) {
    std::string msg = "file size " + std::to_string(bytes.size()) + " does not match the header (dim " +
                      std::to_string(dim) + ", hidden_dim " + std::to_string(hidden) + ", n_layers " +
                      std::to_string(n_layers) + ", n_heads " + std::to_string(c.n_heads) + ", n_kv_heads " +
                      std::to_string(c.n_kv_heads) + ", vocab_size " + std::to_string(c.vocab_size) +
                      (c.shared_classifier ? " shared" : " unshared") + ", seq_len " + std::to_string(c.seq_len) +
                      "), which needs " + std::to_string(expected) + " bytes";
    const uint64_t cls_bytes = static_cast<uint64_t>(c.vocab_size * dim) * sizeof(float);
    if (c.shared_classifier && bytes.size() == expected + cls_bytes)
      msg += "; the extra bytes are exactly one [vocab][dim] classifier: vocab_size should be negative";
    else if (!c.shared_classifier && bytes.size() + cls_bytes == expected)
      msg += "; the file lacks the [vocab][dim] classifier that a negative vocab_size announces";
    else if (bytes.size() < expected)
      msg += " (truncated?)";
    return fail(path, msg);
  }
  add_f32(file, "token_embd.weight", cur.at(emb), dim, c.vocab_size);
  for (int64_t l = 0; l < n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const uint64_t f = sizeof(float);
    add_f32(file, p + "attn_norm.weight", cur.at(rms_att + l * dim * f), dim, 1);
    add_f32(file, p + "attn_q.weight", cur.at(wq + l * dim * dim * f), dim, dim);
    add_f32(file, p + "attn_k.weight", cur.at(wk + l * kv_dim * dim * f), dim, kv_dim);
    add_f32(file, p + "attn_v.weight", cur.at(wv + l * kv_dim * dim * f), dim, kv_dim);
    add_f32(file, p + "attn_output.weight", cur.at(wo + l * dim * dim * f), dim, dim);
    add_f32(file, p + "ffn_norm.weight", cur.at(rms_ffn + l * dim * f), dim, 1);
    add_f32(file, p + "ffn_gate.weight", cur.at(w1 + l * hidden * dim * f), dim, hidden);
    add_f32(file, p + "ffn_down.weight", cur.at(w2 + l * dim * hidden * f), hidden, dim);
    add_f32(file, p + "ffn_up.weight", cur.at(w3 + l * hidden * dim * f), dim, hidden);
  }
  add_f32(file, "output_norm.weight", cur.at(rms_final), dim, 1);
  if (!c.shared_classifier) add_f32(file, "output.weight", cur.at(wcls), dim, c.vocab_size);
  return Status();
}

void set_metadata(const Llama2cConfig& c, const std::string& bin_path, ModelFile* file) {
  file->set_meta("general.architecture", MetaValue::of_string("llama"));
  std::string stem = bin_path.substr(bin_path.find_last_of('/') + 1);
  if (stem.size() > 4 && stem.ends_with(".bin")) stem.resize(stem.size() - 4);
  file->set_meta("general.name", MetaValue::of_string(stem));
  file->set_meta("llama.embedding_length", MetaValue::of_u32(static_cast<uint32_t>(c.dim)));
  file->set_meta("llama.feed_forward_length", MetaValue::of_u32(static_cast<uint32_t>(c.hidden_dim)));
  file->set_meta("llama.block_count", MetaValue::of_u32(static_cast<uint32_t>(c.n_layers)));
  file->set_meta("llama.attention.head_count", MetaValue::of_u32(static_cast<uint32_t>(c.n_heads)));
  file->set_meta("llama.attention.head_count_kv", MetaValue::of_u32(static_cast<uint32_t>(c.n_kv_heads)));
  file->set_meta("llama.context_length", MetaValue::of_u32(static_cast<uint32_t>(c.seq_len)));
  file->set_meta("llama.rope.dimension_count", MetaValue::of_u32(static_cast<uint32_t>(c.head_size())));
  file->set_meta("llama.vocab_size", MetaValue::of_u32(static_cast<uint32_t>(c.vocab_size)));
  file->set_meta("llama.attention.layer_norm_rms_epsilon", MetaValue::of_f32(1e-5f));
  file->set_meta("llama.rope.freq_base", MetaValue::of_f32(10000.0f));
}

bool is_byte_token(std::string_view s) {
  auto hex = [](char ch) { return (ch >= '0' && ch <= '9') || (ch >= 'A' && ch <= 'F') || (ch >= 'a' && ch <= 'f'); };
  return s.size() == 6 && s.starts_with("<0x") && hex(s[3]) && hex(s[4]) && s[5] == '>';
}

std::string to_spm_piece(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    if (ch == ' ')
      out += "\xe2\x96\x81";  // U+2581 '▁'
    else
      out.push_back(ch);
  }
  return out;
}

}  // namespace

Status parse_llama2c_tokenizer(std::span<const std::byte> bytes, const std::string& path, int64_t vocab_size,
                               ModelFile* file) {
  constexpr int32_t kUnkId = 0, kBosId = 1, kEosId = 2;
  constexpr int32_t kTypeNormal = 1, kTypeUnknown = 2, kTypeControl = 3, kTypeByte = 6;
  auto tfail = [&](const std::string& msg) { return error("llama2c tokenizer: " + msg + " (in '" + path + "')"); };
  if (bytes.size() < 4) return tfail("file too small (" + std::to_string(bytes.size()) + " bytes)");
  int32_t max_token_length = 0;
  std::memcpy(&max_token_length, bytes.data(), 4);
  if (max_token_length < 0) return tfail("max_token_length " + std::to_string(max_token_length) + " is negative");
  // Each token needs at least 8 bytes: bound the count before reserving.
  if (vocab_size < 0 || static_cast<uint64_t>(vocab_size) > (bytes.size() - 4) / 8)
    return tfail("file of " + std::to_string(bytes.size()) + " bytes cannot hold " + std::to_string(vocab_size) +
                 " tokens (the checkpoint's vocab_size)");
  std::vector<std::string> tokens;
  std::vector<double> scores;
  std::vector<int64_t> types;
  tokens.reserve(vocab_size);
  scores.reserve(vocab_size);
  types.reserve(vocab_size);
  size_t pos = 4;
  for (int64_t id = 0; id < vocab_size; ++id) {
    if (bytes.size() - pos < 8)
      return tfail("truncated at token " + std::to_string(id) + " of " + std::to_string(vocab_size));
    float score = 0;
    int32_t len = 0;
    std::memcpy(&score, bytes.data() + pos, 4);
    std::memcpy(&len, bytes.data() + pos + 4, 4);
    pos += 8;
    if (len < 0 || static_cast<uint64_t>(len) > bytes.size() - pos)
      return tfail("token " + std::to_string(id) + ": length " + std::to_string(len) + " exceeds the " +
                   std::to_string(bytes.size() - pos) + " bytes left");
    const std::string_view text(reinterpret_cast<const char*>(bytes.data() + pos), static_cast<size_t>(len));
    pos += static_cast<size_t>(len);
    int64_t type = kTypeNormal;
    std::string piece;
    if (id == kUnkId) {
      piece = "<unk>";
      type = kTypeUnknown;
    } else if (id == kBosId) {
      piece = "<s>";
      type = kTypeControl;
    } else if (id == kEosId) {
      piece = "</s>";
      type = kTypeControl;
    } else if (text.empty()) {
      type = kTypeControl;
    } else if (is_byte_token(text)) {
      piece = std::string(text);
      type = kTypeByte;
    } else {
      piece = to_spm_piece(text);
    }
    tokens.push_back(std::move(piece));
    scores.push_back(score);
    types.push_back(type);
  }
  if (pos != bytes.size())
    return tfail(std::to_string(bytes.size() - pos) + " trailing bytes after " + std::to_string(vocab_size) +
                 " tokens (does the tokenizer belong to this checkpoint?)");
  file->set_meta("tokenizer.ggml.model", MetaValue::of_string("llama"));
  file->set_meta("tokenizer.ggml.tokens", MetaValue::of_string_array(std::move(tokens)));
  file->set_meta("tokenizer.ggml.scores", MetaValue::of_float_array(ValueType::kF32, std::move(scores)));
  file->set_meta("tokenizer.ggml.token_type", MetaValue::of_int_array(ValueType::kI32, std::move(types)));
  file->set_meta("tokenizer.ggml.unknown_token_id", MetaValue::of_u32(kUnkId));
  file->set_meta("tokenizer.ggml.bos_token_id", MetaValue::of_u32(kBosId));
  file->set_meta("tokenizer.ggml.eos_token_id", MetaValue::of_u32(kEosId));
  return Status();
}

Result<ModelFile> parse_llama2c(std::span<const std::byte> bytes, const std::string& path) {
  LUMEN_ASSIGN_OR_RETURN(const Llama2cConfig config, read_config(bytes, path));
  ModelFile file;
  file.set_container("llama2c", path);
  LUMEN_TRY(add_tensors(config, bytes, path, &file));
  set_metadata(config, path, &file);
  return file;
}

Result<ModelFile> open_llama2c(const std::string& bin_path, const std::string& tokenizer_path) {
  LUMEN_ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::open(bin_path));
  LUMEN_ASSIGN_OR_RETURN(ModelFile file, parse_llama2c(mapped.bytes(), bin_path));
  file.keep_mapping(std::move(mapped));
  const int64_t vocab_size = file.get_int("llama.vocab_size").value_or(0);
  std::string tok_path = tokenizer_path;
  if (tok_path.empty()) {
    const size_t slash = bin_path.find_last_of('/');
    const std::string dir = slash == std::string::npos ? "." : bin_path.substr(0, slash);
    const std::string candidates[] = {dir + "/tokenizer.bin", dir + "/tok" + std::to_string(vocab_size) + ".bin"};
    struct stat st {};
    for (const std::string& c : candidates) {
      if (::stat(c.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
        tok_path = c;
        break;
      }
    }
    if (tok_path.empty())
      return error("llama2c: no tokenizer for '" + bin_path + "': looked for '" + candidates[0] + "' and '" +
                   candidates[1] + "'");
  }
  LUMEN_ASSIGN_OR_RETURN(MappedFile tok, MappedFile::open(tok_path));
  LUMEN_TRY(parse_llama2c_tokenizer(tok.bytes(), tok_path, vocab_size, &file));
  return file;
}

}  // namespace lumen::gguf
