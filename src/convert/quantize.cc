#include "convert/quantize.h"

#include <algorithm>
#include <functional>
#include <map>
#include <span>
#include <optional>
#include <string_view>
#include <utility>

#include "base/thread_pool.h"
#include "convert/gguf_stream.h"
#include "convert/quantize_ref.h"
#include "convert/row_writer.h"
#include "convert/tokenizer_to_gguf.h"
#include "gguf/model_file.h"
#include "kernels/ops.h"
#include "kernels/type_table.h"

namespace lumen::convert {
namespace {

using gguf::MetaValue;
using gguf::ModelFile;
using gguf::TensorInfo;

// Input keys not copied: the writer's own (alignment), the ones this conversion sets, and
// lumen-only descriptions of the input layout that the output no longer has.
constexpr std::string_view kDroppedKeys[] = {
    "general.alignment", "general.file_type", "general.quantization_version",
    "lumen.rope_layout", "lumen.tie_word_embeddings",
};

// Output order of metadata keys: general.architecture, general.*, <arch>.*, tokenizer.*, rest.
int key_rank(std::string_view key, std::string_view arch) {
  if (key == "general.architecture") return 0;
  if (key.starts_with("general.")) return 1;
  if (!arch.empty() && key.starts_with(arch) && key.size() > arch.size() && key[arch.size()] == '.') return 2;
  if (key.starts_with("tokenizer.")) return 3;
  return 4;
}

// Output row (or element) -> input row of a head-major q/k tensor stored NeoX-style
// (see quantize.h): GGUF row 2i + s of a head comes from HF row s * head_dim/2 + i.
int64_t interleaved_from_neox(int64_t out_idx, int64_t head_dim) {
  const int64_t head = out_idx / head_dim;
  const int64_t r = out_idx % head_dim;
  return head * head_dim + (r % 2) * (head_dim / 2) + r / 2;
}

struct PlannedTensor {
  const TensorInfo* src;
  DType to;
  std::vector<int64_t> ne;
  int64_t head_dim = 0;        // > 0: rows (2-D) or elements (1-D) are permuted NeoX -> interleaved
  std::vector<float> imatrix;  // importance weights (ne[0] per expert), or empty
  const std::vector<float>* awq_columns = nullptr;  // AWQ: multiply column j by it (matrices)
  const std::vector<float>* awq_divisors = nullptr;  // AWQ: divide element j by it (norms)
};

// "blk.N.<suffix>" -> true when the tensor name ends with ".<suffix>" after a block prefix.
bool is_block_tensor(std::string_view name, std::string_view suffix) {
  return name.starts_with("blk.") && name.ends_with(suffix) && name.size() > suffix.size() &&
         name[name.size() - suffix.size() - 1] == '.';
}

// The tensors written (the input's, without an output.weight that aliases token_embd.weight:
// the HF reader makes one for tied embeddings, and a GGUF without output.weight is tied) and
// the type each gets under `rules`.
struct TypePlan {
  std::vector<const TensorInfo*> tensors;
  std::vector<DType> types;
  bool dropped_tied_output = false;
};

Result<TypePlan> plan_types(const ModelFile& file, const TypeRules& rules) {
  const std::string arch(file.get_string("general.architecture").value_or(""));
  const TensorInfo* embd = file.find_tensor("token_embd.weight");
  const TensorInfo* output = file.find_tensor("output.weight");
  TypePlan plan;
  plan.dropped_tied_output = embd && output && output->view.data == embd->view.data &&
                             output->view.dtype == embd->view.dtype && output->view.n_bytes == embd->view.n_bytes;
  std::vector<TensorDesc> descs;
  for (const TensorInfo& t : file.tensors()) {
    if (plan.dropped_tied_output && &t == output) continue;
    plan.tensors.push_back(&t);
    descs.push_back(TensorDesc{t.name, std::span<const int64_t>(t.view.ne, t.view.n_dims), t.view.dtype});
  }
  auto meta_int = [&](const std::string& key) { return file.get_int(arch + "." + key).value_or(0); };
  const int64_t n_head = meta_int("attention.head_count");
  const MixModelInfo model =
      make_mix_model_info(arch, meta_int("block_count"), n_head,
                          file.get_int(arch + ".attention.head_count_kv").value_or(n_head), meta_int("expert_count"));
  LUMEN_ASSIGN_OR_RETURN(plan.types, plan_tensor_types(rules, model, descs));
  return plan;
}

class Quantizer {
 public:
  Quantizer(const ModelFile& file, const QuantizeOptions& opt, QuantizeReport* report)
      : file_(file), opt_(opt), report_(report) {}

  Status plan() {
    arch_ = std::string(file_.get_string("general.architecture").value_or(""));
    if (arch_.empty()) return error("input: missing 'general.architecture'");
    report_->container = std::string(file_.container());
    report_->arch = arch_;
    LUMEN_TRY(plan_metadata());
    LUMEN_TRY(plan_tensors());
    return Status();
  }

  Status write(const std::string& out_path) {
    ThreadPool pool(std::max(1, opt_.n_threads));
    uint64_t total = 0;
    for (const PlannedTensor& p : planned_) total += n_elements(p.ne);
    if (opt_.progress) opt_.progress->start("quantize", total, "weights");
    uint64_t done = 0;
    Status st = writer_.write_file(out_path, [&](size_t idx, TensorSink& sink) {
      const PlannedTensor& p = planned_[idx];
      const uint64_t n_per_row = static_cast<uint64_t>(p.ne[0]);
      auto on_chunk = [&](int64_t n_rows_done) {
        if (opt_.progress) opt_.progress->update(done + n_per_row * static_cast<uint64_t>(n_rows_done), p.src->name);
      };
      Status tensor_st = write_tensor(pool, p, sink, on_chunk);
      done += n_elements(p.ne);
      if (!tensor_st.ok()) return error("tensor '" + p.src->name + "': " + tensor_st.message());
      return tensor_st;
    });
    if (opt_.progress) opt_.progress->finish();
    if (!st.ok()) return error("writing '" + out_path + "': " + st.message());
    report_->file_bytes = writer_.file_bytes();
    return Status();
  }

 private:
  static uint64_t n_elements(const std::vector<int64_t>& ne) {
    uint64_t n = 1;
    for (int64_t d : ne) n *= static_cast<uint64_t>(d);
    return n;
  }

  Status plan_metadata() {
    std::vector<std::pair<std::string, MetaValue>> entries;
    for (const auto& [key, value] : file_.metadata()) {
      if (std::find(std::begin(kDroppedKeys), std::end(kDroppedKeys), key) != std::end(kDroppedKeys)) continue;
      entries.emplace_back(key, value);
    }
    if (file_.container() == "safetensors") LUMEN_TRY(convert_hf_tokenizer(&entries));
    else report_->tokenizer = file_.find("tokenizer.ggml.model") ? "from the input's metadata" : "none";
    entries.emplace_back("general.file_type", MetaValue::of_u32(static_cast<uint32_t>(opt_.rules.mix->ftype)));
    entries.emplace_back("general.quantization_version", MetaValue::of_u32(2));
    if (opt_.awq) {
      entries.emplace_back("quantize.awq.matrices", MetaValue::of_i32(static_cast<int32_t>(opt_.awq->column_scales.size())));
      entries.emplace_back("quantize.awq.norms", MetaValue::of_i32(static_cast<int32_t>(opt_.awq->norm_divisors.size())));
    }
    if (opt_.imatrix) {
      // llama-quantize's record of the importance matrix (its KV overrides).
      entries.emplace_back("quantize.imatrix.file", MetaValue::of_string(opt_.imatrix_path.substr(0, 127)));
      if (!opt_.imatrix->dataset.empty())
        entries.emplace_back("quantize.imatrix.dataset", MetaValue::of_string(opt_.imatrix->dataset.substr(0, 127)));
      entries.emplace_back("quantize.imatrix.entries_count",
                           MetaValue::of_i32(static_cast<int32_t>(opt_.imatrix->entries.size())));
      if (opt_.imatrix->n_chunks > 0)
        entries.emplace_back("quantize.imatrix.chunks_count", MetaValue::of_i32(opt_.imatrix->n_chunks));
    }
    std::stable_sort(entries.begin(), entries.end(), [&](const auto& a, const auto& b) {
      return key_rank(a.first, arch_) < key_rank(b.first, arch_);
    });
    for (auto& [key, value] : entries) writer_.set(std::move(key), std::move(value));
    return Status();
  }

  Status convert_hf_tokenizer(std::vector<std::pair<std::string, MetaValue>>* entries) {
    if (file_.hf_tokenizer_json().empty())
      return error("input: the Hugging Face directory has no tokenizer.json (the GGUF needs a vocabulary)");
    const TensorInfo* embd = file_.find_tensor("token_embd.weight");
    TokenizerGgufOptions topt;
    topt.n_vocab = embd ? embd->view.ne[1] : 0;
    topt.bos_id = file_.get_int("tokenizer.ggml.bos_token_id").value_or(-1);
    topt.eos_id = file_.get_int("tokenizer.ggml.eos_token_id").value_or(-1);
    topt.pad_id = file_.get_int("tokenizer.ggml.padding_token_id").value_or(-1);
    HfTokenizerTexts texts{file_.hf_tokenizer_json(), file_.hf_tokenizer_config_json(), ""};
    Result<TokenizerGguf> tok = hf_tokenizer_to_gguf(texts, topt);
    if (!tok.ok()) return error("input tokenizer: " + tok.message());
    // The converter's special ids win over config.json's (llama.cpp's order).
    for (auto& [key, value] : tok->metadata) {
      std::erase_if(*entries, [&](const auto& e) { return e.first == key; });
      entries->emplace_back(key, std::move(value));
    }
    report_->tokenizer = "tokenizer.json -> " + tok->model + " (pre " + tok->pre + ", " +
                         std::to_string(tok->n_tokens_kept) + " tokens" +
                         (tok->n_tokens_padded ? ", " + std::to_string(tok->n_tokens_padded) + " padding" : "") + ")";
    return Status();
  }

  Status plan_tensors() {
    LUMEN_ASSIGN_OR_RETURN(TypePlan type_plan, plan_types(file_, opt_.rules));
    report_->dropped_tied_output = type_plan.dropped_tied_output;
    const std::vector<const TensorInfo*>& inputs = type_plan.tensors;
    const std::vector<DType>& types = type_plan.types;

    int64_t n_head = 0, n_head_kv = 0;
    const bool permute = arch_ == "llama" && file_.get_string("lumen.rope_layout").value_or("") == "neox";
    if (permute) {
      n_head = file_.get_int(arch_ + ".attention.head_count").value_or(0);
      n_head_kv = file_.get_int(arch_ + ".attention.head_count_kv").value_or(n_head);
      if (n_head <= 0 || n_head_kv <= 0)
        return error("input: NeoX-layout llama without valid attention.head_count / head_count_kv");
      report_->permuted_qk = true;
    }

    std::string unwritable;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const TensorInfo& t = *inputs[i];
      PlannedTensor p{&t, types[i], std::vector<int64_t>(t.view.ne, t.view.ne + t.view.n_dims), 0, {}};
      if (permute) {
        const bool is_q = is_block_tensor(t.name, "attn_q.weight") || is_block_tensor(t.name, "attn_q.bias");
        const bool is_k = is_block_tensor(t.name, "attn_k.weight") || is_block_tensor(t.name, "attn_k.bias");
        if (is_q || is_k) {
          const int64_t heads = is_q ? n_head : n_head_kv;
          const int64_t n = t.view.n_dims == 1 ? t.view.ne[0] : t.view.n_rows();
          if (n % heads != 0 || (n / heads) % 2 != 0)
            return error("input: tensor '" + t.name + "' with " + std::to_string(n) + " rows does not split into " +
                         std::to_string(heads) + " heads of even size");
          p.head_dim = n / heads;
        }
      }
      const DType from = t.view.dtype;
      if (from != p.to || (opt_.awq && (opt_.awq->column_scales.count(t.name) || opt_.awq->norm_divisors.count(t.name)))) {
        LUMEN_TRY(plan_imatrix(t, p));
        // Reported after every tensor was checked, so that a missing importance matrix (the
        // user's to fix) is named first.
        if (!can_quantize_to(p.to) && unwritable.empty())
          unwritable = "--type " + std::string(opt_.rules.mix ? opt_.rules.mix->name : dtype_name(p.to)) +
                       ": tensor '" + t.name + "' would be " + std::string(dtype_name(p.to)) +
                       ", which lumen cannot write yet (no quantizer for that type; nothing was written)";
        if (!kernels::can_dequantize(from))
          return error("input: tensor '" + t.name + "' has type " + std::string(dtype_name(from)) +
                       ", which lumen cannot convert to " + std::string(dtype_name(p.to)));
        if (dtype_info(from).is_quantized && !opt_.allow_requantize)
          return error("input: tensor '" + t.name + "' is already " + std::string(dtype_name(from)) +
                       "; writing it as " + std::string(dtype_name(p.to)) +
                       " would requantize it (lossy: pass --allow-requantize to do it anyway)");
        LUMEN_TRY(plan_awq(t, p));
      }
      Status st = writer_.add_tensor(t.name, p.to, p.ne);
      if (!st.ok()) return error("output: " + st.message());
      report_->tensors.push_back(
          TensorReport{t.name, from, p.to, p.ne, writer_.tensors().back().n_bytes, !p.imatrix.empty()});
      report_->n_bytes_in += t.view.n_bytes;
      planned_.push_back(std::move(p));
    }
    if (!unwritable.empty()) return error(unwritable);
    return Status();
  }

  // The importance weights of a tensor that is quantized (llama-quantize's rules: an entry
  // of the wrong size is an error, except for token_embd, which is then quantized without;
  // no entry is allowed unless the type needs one).
  // AWQ scales of a tensor (awq_scales.h): the scaled matrices' importance weights are those
  // of the scaled activations, x'^2 = x^2 / s^2.
  Status plan_awq(const TensorInfo& t, PlannedTensor& p) {
    if (!opt_.awq) return Status();
    const auto col = opt_.awq->column_scales.find(t.name);
    const auto div = opt_.awq->norm_divisors.find(t.name);
    const std::vector<float>* s = col != opt_.awq->column_scales.end() ? &col->second
                                  : div != opt_.awq->norm_divisors.end() ? &div->second
                                                                         : nullptr;
    if (!s) return Status();
    if (static_cast<int64_t>(s->size()) != p.ne[0] || (div != opt_.awq->norm_divisors.end() && p.ne.size() != 1))
      return error("awq: scales of '" + t.name + "' do not fit its shape " + t.view.shape_string());
    if (dtype_info(t.view.dtype).is_quantized && !opt_.allow_requantize)
      return error("awq: tensor '" + t.name + "' is already " + std::string(dtype_name(t.view.dtype)) +
                   "; scaling it means requantizing it (pass --allow-requantize to do it anyway)");
    (col != opt_.awq->column_scales.end() ? p.awq_columns : p.awq_divisors) = s;
    if (p.awq_columns && !p.imatrix.empty())
      for (size_t j = 0; j < p.imatrix.size(); ++j) p.imatrix[j] /= (*s)[j % s->size()] * (*s)[j % s->size()];
    return Status();
  }

  Status plan_imatrix(const TensorInfo& t, PlannedTensor& p) {
    if (!dtype_info(p.to).is_quantized) return Status();
    if (opt_.imatrix) {
      std::vector<float> w = opt_.imatrix->weights(t.name);
      const int64_t n_expected = p.ne[0] * (p.ne.size() > 2 ? p.ne[2] : 1);
      if (!w.empty() && static_cast<int64_t>(w.size()) != n_expected) {
        if (t.name != "token_embd.weight")
          return error("imatrix: entry '" + t.name + "' has " + std::to_string(w.size()) + " values, the tensor needs " +
                       std::to_string(n_expected) + " (an importance matrix of another model?)");
        w.clear();
      }
      if (w.empty() && quantize_uses_imatrix(p.to)) report_->no_imatrix_entry.push_back(t.name);
      if (quantize_uses_imatrix(p.to)) p.imatrix = std::move(w);
    }
    if (!p.imatrix.empty() || !requires_imatrix(opt_.rules, t.name, p.to)) return Status();
    const std::string what = "tensor '" + t.name + "': " + std::string(dtype_name(p.to)) + " (type " +
                             std::string(opt_.rules.mix ? opt_.rules.mix->name : dtype_name(p.to)) + ")";
    if (!opt_.imatrix)
      return error(what +
                   " needs an importance matrix for this tensor; the result would be garbage without one "
                   "(make one with `lumen imatrix` and pass --imatrix FILE)" +
                   (can_quantize_to(p.to) ? "" : "; lumen also has no quantizer for " + std::string(dtype_name(p.to)) + " yet"));
    // An importance matrix was given: when lumen cannot write the type at all, that is what the
    // caller reports (below), not the importance data.
    if (can_quantize_to(p.to))
      return error(what + " needs importance data for this tensor, and the importance matrix has no entry '" +
                   t.name + "' (one made on another model?)");
    return Status();
  }

  static Status write_tensor(ThreadPool& pool, const PlannedTensor& p, TensorSink& sink,
                             const std::function<void(int64_t)>& on_chunk) {
    const TensorView& v = p.src->view;
    RowWriteOptions row_opt;
    row_opt.on_chunk = on_chunk;
    if (!p.imatrix.empty()) {
      row_opt.imatrix = p.imatrix.data();
      row_opt.rows_per_slice = v.n_dims > 1 ? v.ne[1] : 1;
    }
    if (v.n_dims == 1) {
      // A vector: one row; a q/k bias is permuted element-wise; an AWQ-scaled norm divided.
      return write_rows(pool, p.to, v.ne[0], 1, [&](int64_t, float* out) {
        kernels::dequantize_row(v.dtype, v.data, out, v.ne[0]);
        if (p.head_dim > 0) {
          std::vector<float> in(out, out + v.ne[0]);
          for (int64_t i = 0; i < v.ne[0]; ++i) out[i] = in[interleaved_from_neox(i, p.head_dim)];
        }
        if (p.awq_divisors)
          for (int64_t i = 0; i < v.ne[0]; ++i) out[i] /= (*p.awq_divisors)[i];
      }, sink, row_opt);
    }
    auto src_row = [&](int64_t r) { return p.head_dim > 0 ? interleaved_from_neox(r, p.head_dim) : r; };
    if (p.awq_columns) {
      const std::vector<float>& s = *p.awq_columns;
      return write_rows(pool, p.to, v.ne[0], v.n_rows(), [&](int64_t r, float* out) {
        kernels::dequantize_row(v.dtype, v.row(src_row(r)), out, v.ne[0]);
        for (int64_t j = 0; j < v.ne[0]; ++j) out[j] *= s[j];
      }, sink, row_opt);
    }
    if (v.dtype == p.to) {
      Status st = copy_rows(p.to, v.ne[0], v.n_rows(), [&](int64_t r) { return v.row(src_row(r)); }, sink);
      if (st.ok() && on_chunk) on_chunk(v.n_rows());
      return st;
    }
    return write_rows(pool, p.to, v.ne[0], v.n_rows(), [&](int64_t r, float* out) {
      kernels::dequantize_row(v.dtype, v.row(src_row(r)), out, v.ne[0]);
    }, sink, row_opt);
  }

  const ModelFile& file_;
  const QuantizeOptions& opt_;
  QuantizeReport* report_;
  std::string arch_;
  GgufStreamWriter writer_;
  std::vector<PlannedTensor> planned_;
};

}  // namespace

Result<std::map<std::string, DType>> plan_quantized_types(const ModelFile& file, const TypeRules& rules) {
  LUMEN_ASSIGN_OR_RETURN(TypePlan plan, plan_types(file, rules));
  std::map<std::string, DType> out;
  for (size_t i = 0; i < plan.tensors.size(); ++i) out[plan.tensors[i]->name] = plan.types[i];
  return out;
}

Status quantize_model(const std::string& in_path, const std::string& out_path, const QuantizeOptions& options,
                      QuantizeReport* report) {
  if (!options.rules.mix) return error("quantize: no type given");
  QuantizeOptions opt = options;
  opt.rules.has_imatrix = options.imatrix != nullptr;
  QuantizeReport local;
  if (!report) report = &local;
  *report = QuantizeReport();
  Result<ModelFile> file = gguf::open_model(in_path);
  if (!file.ok()) return error("cannot read '" + in_path + "': " + file.message());
  Quantizer q(*file, opt, report);
  LUMEN_TRY(q.plan());
  return q.write(out_path);
}

}  // namespace lumen::convert
