// lumen info: what a model file is — container, architecture, shapes, tensor types,
// tokenizer, bytes.
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/cpu_features.h"
#include "base/hash.h"
#include "cli/common.h"
#include "gguf/model_file.h"
#include "kernels/ops.h"
#include "kv/kv_manager.h"
#include "model/hparams.h"
#include "model/layer_spec.h"
#include "tokenizer/tokenizer.h"

namespace lumen::cli {
namespace {

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

int cmd_info(int argc, char** argv, int first) {
  ArgParser args("info", "lumen info -m MODEL [--json] [--tensors]",
                 {
                     {{"-m", "--model"}, "PATH", "model: .gguf, HF directory or llama2.c .bin"},
                     {{"--tensors"}, "", "list every tensor (type, shape, bytes, FNV-1a 64 of its bytes)"},
                     {{"-c", "--ctx-size"}, "N", "sequence length for the KV bytes per sequence (default: trained context)"},
                     {{"--kv-type"}, "TYPE", "KV cache type of K and V for the KV bytes (default f16)"},
                     {{"-ctk", "--cache-type-k"}, "TYPE", "KV cache type of K (overrides --kv-type)"},
                     {{"-ctv", "--cache-type-v"}, "TYPE", "KV cache type of V (overrides --kv-type)"},
                     {{"--json"}, "", "print one JSON object"},
                     {{"-v", "--verbose"}, "", "verbose logging"},
                 });
  int rc = 0;
  if (!parse_or_report(args, argc, argv, first, rc)) return rc;
  auto model_path = args.get("--model");
  if (!model_path) {
    std::fprintf(stderr, "error: missing -m/--model PATH\n");
    return 2;
  }
  auto file = gguf::open_model(*model_path);
  if (!file.ok()) {
    std::fprintf(stderr, "error: %s\n", file.message().c_str());
    return 1;
  }
  auto hp = model::read_hparams(*file);
  auto tk = tok::Tokenizer::from_model_file(*file);
  auto ctx_arg = args.get_int("--ctx-size", 0, 1, int64_t{1} << 24);
  if (!ctx_arg.ok()) {
    std::fprintf(stderr, "error: %s\n", ctx_arg.message().c_str());
    return 2;
  }
  engine::EngineConfig kv_config;
  if (Status st = kv_config_from_args(args, &kv_config); !st.ok()) {
    std::fprintf(stderr, "error: %s\n", st.message().c_str());
    return 2;
  }
  const KvDTypes kv_types = kv_config.kv_dtypes;
  // The KV cache as the engine lays it out: one group per attention window (kv/kv_manager.h).
  std::optional<model::KvLayout> layout;
  std::string layout_error;
  if (hp.ok()) {
    auto specs = model::read_layer_specs(*file, *hp);
    if (specs.ok()) {
      auto l = model::make_kv_layout(*hp, *specs);
      if (l.ok()) {
        layout = std::move(l).value();
      } else {
        layout_error = l.message();
      }
    } else {
      layout_error = specs.message();
    }
  }
  constexpr int32_t kBlock = 16;  // the engine's default --block-size
  const int64_t n_seq_tokens = *ctx_arg > 0 ? *ctx_arg : (hp.ok() ? hp->n_ctx_train : 0);
  struct KvGroupInfo {
    int32_t window = 0;
    std::vector<int32_t> layers;
    uint64_t bytes_per_token = 0;     // K and V of all the group's layers (kv_types)
    uint64_t bytes_per_token_f16 = 0;
    uint64_t bytes_per_sequence = 0;  // what a sequence of n_seq_tokens holds in the group
    uint64_t bytes_per_sequence_f16 = 0;
  };
  std::vector<KvGroupInfo> kv_groups;
  uint64_t kv_bytes_per_token = 0, kv_bytes_per_sequence = 0;
  uint64_t kv_bytes_per_token_f16 = 0, kv_bytes_per_sequence_f16 = 0;
  if (layout) {
    for (int32_t g = 0; g < layout->n_groups(); ++g) {
      KvGroupInfo gi;
      gi.window = layout->groups[g].window;
      gi.layers = layout->groups[g].layers;
      gi.bytes_per_token = layout->group_bytes_per_token(g, kv_types);
      gi.bytes_per_token_f16 = layout->group_bytes_per_token(g, 2);
      const kv::KvGroupSpec spec{layout->n_slots(g), gi.window};
      const uint64_t seq_tokens = kBlock * static_cast<uint64_t>(kv::seq_blocks_at(spec, kBlock, n_seq_tokens));
      gi.bytes_per_sequence = gi.bytes_per_token * seq_tokens;
      gi.bytes_per_sequence_f16 = gi.bytes_per_token_f16 * seq_tokens;
      kv_bytes_per_token += gi.bytes_per_token;
      kv_bytes_per_sequence += gi.bytes_per_sequence;
      kv_bytes_per_token_f16 += gi.bytes_per_token_f16;
      kv_bytes_per_sequence_f16 += gi.bytes_per_sequence_f16;
      kv_groups.push_back(std::move(gi));
    }
  }
  std::map<std::string, std::pair<int, uint64_t>> by_type;  // dtype -> (count, bytes)
  uint64_t total_bytes = 0, n_params = 0;
  uint64_t expert_bytes = 0, expert_params = 0;  // the 3-D ffn_*_exps tensors
  for (const gguf::TensorInfo& t : file->tensors()) {
    auto& e = by_type[std::string(dtype_name(t.view.dtype))];
    e.first++;
    e.second += t.view.n_bytes;
    total_bytes += t.view.n_bytes;
    n_params += static_cast<uint64_t>(t.view.n_elements());
    if (t.name.ends_with("_exps.weight")) {
      expert_bytes += t.view.n_bytes;
      expert_params += static_cast<uint64_t>(t.view.n_elements());
    }
  }
  // A mixture of experts: a token goes through n_expert_used of each layer's experts, so
  // its active parameters are all but the other experts' (embeddings counted whole, as
  // model cards count them).
  const bool moe = hp.ok() && hp->is_moe();
  const double active_share = moe ? static_cast<double>(hp->n_expert_used) / hp->n_expert : 1.0;
  const auto active_params = static_cast<uint64_t>(n_params - expert_params * (1.0 - active_share));
  const auto active_bytes = static_cast<uint64_t>(total_bytes - expert_bytes * (1.0 - active_share));
  nlohmann::json j;
  j["path"] = *model_path;
  j["container"] = std::string(file->container());
  if (file->gguf_version()) j["gguf_version"] = file->gguf_version();
  j["n_tensors"] = file->tensors().size();
  j["n_params"] = n_params;
  j["tensor_bytes"] = total_bytes;
  for (const auto& [name, e] : by_type) j["tensor_types"][name] = {{"count", e.first}, {"bytes", e.second}};
  if (hp.ok()) {
    j["arch"] = std::string(model::arch_name(hp->arch));
    j["n_vocab"] = hp->n_vocab;
    j["n_embd"] = hp->n_embd;
    j["n_layer"] = hp->n_layer;
    j["n_head"] = hp->n_head;
    j["n_kv_head"] = hp->n_kv_head;
    j["head_dim"] = hp->head_dim;
    j["n_ff"] = hp->n_ff;
    j["n_ctx_train"] = hp->n_ctx_train;
    j["rms_eps"] = hp->rms_eps;
    j["rope_theta"] = hp->rope_theta;
    j["rope_layout"] = hp->rope_layout == kernels::RopeLayout::kNeox ? "neox" : "interleaved";
    if (!hp->rope_scaling_type.empty()) j["rope_scaling"] = hp->rope_scaling_type;
    j["qkv_bias"] = hp->has_qkv_bias;
    if (moe) {
      j["n_expert"] = hp->n_expert;
      j["n_expert_used"] = hp->n_expert_used;
      j["n_ff_exp"] = hp->n_ff_exp;
      if (hp->n_ff_shexp > 0) j["n_ff_shexp"] = hp->n_ff_shexp;
      j["expert_weights_norm"] = hp->expert_weights_norm;
      if (hp->arch == model::Arch::kDeepseek2) {
        j["expert_gating"] = hp->expert_gating_sigmoid ? "sigmoid" : "softmax";
        j["expert_weights_scale"] = hp->expert_weights_scale;
        j["n_layer_dense_lead"] = hp->n_layer_dense_lead;
      }
      j["active_params"] = active_params;
      j["active_tensor_bytes"] = active_bytes;
    }
    j["tied_output"] = hp->tied_output;
    if (hp->is_mla()) {  // the cache holds one row of kv_lora_rank + rope dims per token and layer
      j["mla"] = {{"kv_lora_rank", hp->n_lora_kv}, {"q_lora_rank", hp->n_lora_q}, {"rope_dims", hp->rope_dims},
                  {"qk_nope_dim", hp->qk_nope_dim()}, {"v_head_dim", hp->head_dim_v}, {"kv_row", hp->mla_row()}};
    }
    if (layout) {
      // A token's K/V over every layer that stores it (a sliding group's only while the
      // token is in its window), and what a sequence of kv_sequence_tokens holds, f16,
      // 16-token blocks.
      // The same for the cache types asked for (--kv-type, -ctk, -ctv).
      j["kv_bytes_per_token_f16"] = kv_bytes_per_token_f16;
      j["kv_sequence_tokens"] = n_seq_tokens;
      j["kv_bytes_per_sequence_f16"] = kv_bytes_per_sequence_f16;
      j["kv_type_k"] = std::string(dtype_name(kv_types.k));
      // A K-only cache (MLA) holds no V rows: attention reads V from the K row, so there is no V type.
      j["kv_type_v"] = layout->k_only ? nlohmann::json(nullptr) : nlohmann::json(std::string(dtype_name(kv_types.v)));
      j["kv_k_only"] = layout->k_only;
      j["kv_bytes_per_token"] = kv_bytes_per_token;
      j["kv_bytes_per_sequence"] = kv_bytes_per_sequence;
      for (const KvGroupInfo& gi : kv_groups)
        j["kv_groups"].push_back({{"window", gi.window}, {"layers", gi.layers}, {"bytes_per_token_f16", gi.bytes_per_token_f16},
                                  {"bytes_per_sequence_f16", gi.bytes_per_sequence_f16},
                                  {"bytes_per_token", gi.bytes_per_token}, {"bytes_per_sequence", gi.bytes_per_sequence}});
    } else {
      j["kv_layout_error"] = layout_error;
    }
  } else {
    j["model_error"] = hp.message();
  }
  if (tk.ok()) {
    j["tokenizer"] = {{"model", std::string(tk->model_name())}, {"pre", std::string(tk->pre_name())},
                      {"n_vocab", tk->n_vocab()}, {"bos_id", tk->bos_id()}, {"eos_id", tk->eos_id()},
                      {"add_bos", tk->add_bos()}, {"has_chat_template", !tk->chat_template().empty()}};
  } else {
    j["tokenizer_error"] = tk.message();
  }
  j["cpu"] = cpu_features().describe();
  j["kernels"] = std::string(kernels::kernel_table_name(kernels::best_kernel_table()));
  if (args.has("--tensors")) {
    for (const gguf::TensorInfo& t : file->tensors())
      j["tensors"].push_back({{"name", t.name}, {"type", std::string(dtype_name(t.view.dtype))},
                              {"shape", t.view.shape_string()}, {"bytes", t.view.n_bytes},
                              {"fnv1a", hex64(fnv1a64(t.view.data, t.view.n_bytes))}});
  }
  if (args.has("--json")) {
    std::puts(j.dump(2).c_str());
    return 0;
  }
  std::printf("model:      %s (%s", model_path->c_str(), std::string(file->container()).c_str());
  if (file->gguf_version()) std::printf(" v%u", file->gguf_version());
  std::printf(")\n");
  if (hp.ok()) {
    std::printf("arch:       %s | layers %d | hidden %d | heads %d (kv %d, head dim %d) | ffn %d | vocab %d\n",
                std::string(model::arch_name(hp->arch)).c_str(), hp->n_layer, hp->n_embd, hp->n_head,
                hp->n_kv_head, hp->head_dim, hp->n_ff, hp->n_vocab);
    std::printf("rope:       theta %g, %s layout%s%s | rms eps %g | ctx trained %d | output %s\n",
                hp->rope_theta, hp->rope_layout == kernels::RopeLayout::kNeox ? "neox" : "interleaved",
                hp->rope_scaling_type.empty() ? "" : ", scaling ", hp->rope_scaling_type.c_str(),
                hp->rms_eps, hp->n_ctx_train, hp->tied_output ? "tied to embeddings" : "separate");
    if (moe) {
      std::printf("experts:    %d, %d used per token (weights %s) | expert ffn %d", hp->n_expert, hp->n_expert_used,
                  hp->expert_weights_norm ? "renormalised" : "as routed", hp->n_ff_exp);
      if (hp->n_ff_shexp > 0) std::printf(" | shared expert ffn %d", hp->n_ff_shexp);
      if (hp->arch == model::Arch::kDeepseek2)
        std::printf(" | %s router, weights x %g | %d dense leading layer(s)",
                    hp->expert_gating_sigmoid ? "sigmoid" : "softmax", hp->expert_weights_scale, hp->n_layer_dense_lead);
      std::printf("\n            active per token: %.3f M of %.3f M params, %.2f of %.2f MiB\n", active_params / 1e6,
                  n_params / 1e6, active_bytes / 1048576.0, total_bytes / 1048576.0);
    }
    if (hp->is_mla())
      std::printf("mla:        latent %d + rope key %d cached per token and layer (one row, no V) | q bottleneck %s | "
                  "per head q/k %d + %d, v %d\n",
                  hp->n_lora_kv, hp->rope_dims, hp->n_lora_q > 0 ? std::to_string(hp->n_lora_q).c_str() : "none",
                  hp->qk_nope_dim(), hp->rope_dims, hp->head_dim_v);
    if (layout) {
      // What the cache holds: K and V rows, or (MLA) one K row per token and layer that V is read from.
      const std::string kv_held = layout->k_only ? "K " + std::string(dtype_name(kv_types.k)) + " only (no V rows)"
                                                 : "K " + std::string(dtype_name(kv_types.k)) + ", V " +
                                                       std::string(dtype_name(kv_types.v));
      std::printf("kv cache:   %s, per token: %llu bytes over %d group(s); a sequence of %lld tokens holds %.2f MiB\n",
                  kv_held.c_str(),
                  static_cast<unsigned long long>(kv_bytes_per_token), layout->n_groups(),
                  static_cast<long long>(n_seq_tokens), kv_bytes_per_sequence / 1048576.0);
      for (const KvGroupInfo& gi : kv_groups) {
        std::string layers;
        for (int32_t il : gi.layers) layers += (layers.empty() ? "" : ",") + std::to_string(il);
        std::printf("            %s: %zu layers (%s), %llu bytes per token, %.2f MiB per sequence\n",
                    gi.window == 0 ? "full attention" : ("window " + std::to_string(gi.window)).c_str(),
                    gi.layers.size(), layers.c_str(), static_cast<unsigned long long>(gi.bytes_per_token),
                    gi.bytes_per_sequence / 1048576.0);
      }
    } else {
      std::printf("kv cache:   (no layout: %s)\n", layout_error.c_str());
    }
  } else {
    std::printf("arch:       (not loadable: %s)\n", hp.message().c_str());
  }
  std::printf("tensors:    %zu, %.3f M params, %.2f MiB\n", file->tensors().size(), n_params / 1e6,
              total_bytes / 1048576.0);
  for (const auto& [name, e] : by_type)
    std::printf("            %-6s %4d tensors, %.2f MiB\n", name.c_str(), e.first, e.second / 1048576.0);
  if (tk.ok()) {
    std::printf("tokenizer:  %s%s%s, %d tokens, bos %d, eos %d, add_bos %s, chat template %s\n",
                std::string(tk->model_name()).c_str(), tk->pre_name().empty() ? "" : " / ",
                std::string(tk->pre_name()).c_str(), tk->n_vocab(), tk->bos_id(), tk->eos_id(),
                tk->add_bos() ? "yes" : "no", tk->chat_template().empty() ? "none" : "yes");
  } else {
    std::printf("tokenizer:  (error: %s)\n", tk.message().c_str());
  }
  std::printf("cpu:        %s -> kernels %s\n", cpu_features().describe().c_str(),
              std::string(kernels::kernel_table_name(kernels::best_kernel_table())).c_str());
  if (args.has("--tensors"))
    for (const gguf::TensorInfo& t : file->tensors())
      std::printf("  %-40s %-7s %-20s %10zu %s\n", t.name.c_str(), std::string(dtype_name(t.view.dtype)).c_str(),
                  t.view.shape_string().c_str(), t.view.n_bytes, hex64(fnv1a64(t.view.data, t.view.n_bytes)).c_str());
  return 0;
}

}  // namespace lumen::cli
