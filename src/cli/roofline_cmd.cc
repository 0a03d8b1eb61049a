// lumen roofline: flags -> roofline::Plan -> table | JSON | SVG. The arithmetic lives in
// src/roofline; this file only reads flags, opens the model, measures this machine when
// asked, and prints.
#include "cli/roofline_cmd.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "gguf/model_file.h"
#include "kernels/ops.h"
#include "roofline/hardware.h"
#include "tensor/paged_kv_view.h"
#include "roofline/membw.h"
#include "roofline/plan.h"
#include "roofline/predict.h"
#include "roofline/shape.h"
#include "roofline/svg.h"

namespace lumen::cli {

namespace {

using namespace lumen::roofline;

std::vector<OptionSpec> roofline_option_specs() {
  return {
      {{"-m", "--model"}, "PATH", "model file (.gguf, HF directory, llama2.c .bin): shape and tensor types"},
      {{"--preset"}, "NAME", "named model shape instead of a file (--list shows them)"},
      {{"--hw"}, "NAME", "machine: rtx4090, a100-80g, h100-sxm, h200, m2-ultra, or this (default: this, measured)"},
      {{"--weights"}, "BITS", "weight bits per parameter for the chosen row (default 16, or the file's stored types)"},
      {{"--kv"}, "BITS", "KV cache bits per element (default 16)"},
      {{"--kv-type"}, "TYPE", "KV cache type instead of --kv: f16, f32, bf16, q8_0 (8.5 bits), q4_0 (4.5 bits)"},
      {{"--prompt"}, "N", "prompt length for prefill / TTFT (default 512)"},
      {{"--context"}, "N", "cached tokens per sequence for the decode batch table (default: --prompt)"},
      {{"--batch"}, "LIST", "decode batch sizes, comma-separated (default 1,8,32)"},
      {{"--units"}, "binary|si", "binary: 1 GB = 2^30 B and 1008 GB/s = 1008 x 2^30 B/s; si: powers of 10 (default si)"},
      {{"--tensor-cores"}, "", "use the fp16 tensor-core rate as the compute roof (GPU presets)"},
      {{"--bandwidth"}, "GB/S", "override the machine's memory bandwidth (in --units)"},
      {{"--memory"}, "GB", "override the machine's memory size (in --units)"},
      {{"-t", "--threads"}, "N", "threads for measuring this machine (default: all cores)"},
      {{"--membw-size"}, "BYTES", "buffer for the bandwidth test (default 512MiB)"},
      {{"--huge-pages"}, "", "bandwidth test over transparent huge pages"},
      {{"--spec-k"}, "K", "speculative decoding: draft length to estimate (shows k = 1..8 as well)"},
      {{"--spec-alpha"}, "A", "speculative decoding: acceptance rate per drafted token (default 0.7)"},
      {{"--spec-draft-cost"}, "C", "draft step cost / target step cost (default: from --draft-preset, else 0.05)"},
      {{"--spec-verify-cost"}, "C", "(k+1)-token verify cost / target step cost (default: from the roofline)"},
      {{"--draft-preset"}, "NAME", "draft model shape for the speculative estimate"},
      {{"--json"}, "", "print one JSON object"},
      {{"--plot"}, "FILE.svg", "write the roofline and latency-vs-context charts as SVG"},
      {{"--list"}, "", "list model and hardware presets"},
  };
}

Result<std::vector<int64_t>> parse_batches(const std::string& text) {
  std::vector<int64_t> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    char* end = nullptr;
    const long long v = item.empty() ? 0 : std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 1 || v > (1 << 20))
      return error("--batch: '" + text + "' must be batch sizes in [1, 1048576] separated by commas");
    out.push_back(v);
    pos = comma + 1;
  }
  return out;
}

struct ModelInput {
  ModelShape shape;
  ParamCounts params;
  std::optional<FileWeights> file_weights;
};

Result<ModelInput> load_model_input(const ArgParser& args) {
  const auto model_path = args.get("--model");
  const auto preset = args.get("--preset");
  if (model_path && preset) return error("give either -m/--model or --preset, not both");
  if (!model_path && !preset)
    return error("missing -m/--model PATH or --preset NAME (known presets: " + model_preset_names() + ")");
  ModelInput in;
  if (preset) {
    LUMEN_ASSIGN_OR_RETURN(in.shape, model_preset(*preset, "--preset"));
    in.params = count_params(in.shape);
    return in;
  }
  Result<gguf::ModelFile> file = gguf::open_model(*model_path);
  if (!file.ok()) return error("-m " + *model_path + ": " + file.message());
  Result<ModelShape> shape = shape_from_model_file(*file);
  if (!shape.ok()) return error("-m " + *model_path + ": " + shape.message());
  Result<FileWeights> weights = count_file_weights(*file);
  if (!weights.ok()) return error("-m " + *model_path + ": " + weights.message());
  in.shape = std::move(shape).value();
  in.params = weights->params;
  in.file_weights = std::move(weights).value();
  return in;
}

Result<Hardware> load_hardware(const ArgParser& args, Units units) {
  const std::string name = args.get_or("--hw", "this");
  Hardware hw;
  if (name == "this") {
    const int n_cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    LUMEN_ASSIGN_OR_RETURN(int64_t n_threads, args.get_int("--threads", n_cores, 1, 1024));
    int64_t membw_bytes = static_cast<int64_t>(kDefaultMembwBytes);
    if (auto size = args.get("--membw-size")) {
      Result<int64_t> b = parse_bytes(*size);
      if (!b.ok()) return error("--membw-size: " + b.message());
      if (*b < (int64_t{1} << 20)) return error("--membw-size: '" + *size + "' is below 1MiB");
      membw_bytes = *b;
    }
    std::fprintf(stderr, "lumen roofline: measuring this machine (%lld threads, %lld MiB read test)...\n",
                 static_cast<long long>(n_threads), static_cast<long long>(membw_bytes >> 20));
    ThreadPool pool(static_cast<int>(n_threads));
    hw = measure_this_machine(pool, static_cast<size_t>(membw_bytes), args.has("--huge-pages"));
    if (hw.bandwidth_disturbed && !args.has("--bandwidth"))
      std::fprintf(stderr,
                   "lumen roofline: warning: no bandwidth pass ran undisturbed (the machine is busy), so %.1f GB/s "
                   "is a lower bound; rerun when it is idle, or give --bandwidth\n",
                   hw.read_bytes_per_s / 1e9);
  } else {
    LUMEN_ASSIGN_OR_RETURN(hw, hardware_preset(name, units, "--hw"));
  }
  if (args.has("--bandwidth")) {
    LUMEN_ASSIGN_OR_RETURN(double gb_s, args.get_float("--bandwidth", 0, 1e-3, 1e7));
    hw.read_bytes_per_s = gb_s * unit_scale(units, 3);
    hw.description += " | bandwidth set by --bandwidth";
  }
  if (args.has("--memory")) {
    LUMEN_ASSIGN_OR_RETURN(double gb, args.get_float("--memory", 0, 1e-3, 1e9));
    hw.memory_bytes = gb * unit_scale(units, 3);
    hw.description += " | memory set by --memory";
  }
  return hw;
}

Result<PlanOptions> plan_options(const ArgParser& args, const ModelInput& model, Units units) {
  PlanOptions o;
  o.units = units;
  o.tensor_cores = args.has("--tensor-cores");
  LUMEN_ASSIGN_OR_RETURN(o.n_prompt, args.get_int("--prompt", 512, 1, int64_t{1} << 24));
  LUMEN_ASSIGN_OR_RETURN(o.n_context, args.get_int("--context", o.n_prompt, 0, int64_t{1} << 24));
  LUMEN_ASSIGN_OR_RETURN(o.batches, parse_batches(args.get_or("--batch", "1,8,32")));
  LUMEN_ASSIGN_OR_RETURN(double kv_bits, args.get_float("--kv", 16, 1, 32));
  if (const auto kv_type = args.get("--kv-type")) {
    if (args.has("--kv")) return error("--kv-type: give one of --kv and --kv-type");
    const DTypeInfo* info = find_dtype_by_name(*kv_type);
    if (info == nullptr || !kernels::kv_cache_supports(info->dtype))
      return error("--kv-type: '" + *kv_type + "' is not a KV cache type (" + kernels::kv_cache_type_names() + ")");
    kv_bits = 8.0 * kv_bytes_per_elem({info->dtype, info->dtype}, 32);
  }
  if (args.has("--weights") || !model.file_weights) {
    LUMEN_ASSIGN_OR_RETURN(double weight_bits, args.get_float("--weights", 16, 1, 32));
    o.chosen = make_precision(weight_bits, kv_bits);
  } else {
    // The file as stored: its exact bytes per step, named by its average bits per weight.
    Precision p = make_precision(model.file_weights->bits_per_weight(), kv_bits);
    p.weight_bytes = static_cast<double>(model.file_weights->read_per_step_bytes());
    p.expert_bytes = static_cast<double>(model.file_weights->expert_bytes);
    o.chosen = p;
  }
  const bool spec = args.has("--spec-k") || args.has("--spec-alpha") || args.has("--draft-preset") ||
                    args.has("--spec-draft-cost") || args.has("--spec-verify-cost");
  if (spec) {
    SpeculativeOptions so;
    LUMEN_ASSIGN_OR_RETURN(int64_t k, args.get_int("--spec-k", 4, 1, 64));
    so.k = static_cast<int>(k);
    LUMEN_ASSIGN_OR_RETURN(so.alpha, args.get_float("--spec-alpha", 0.7, 0.0, 1.0));
    if (auto draft = args.get("--draft-preset")) {
      LUMEN_ASSIGN_OR_RETURN(so.draft, model_preset(*draft, "--draft-preset"));
    }
    if (args.has("--spec-draft-cost") || !so.draft) {
      LUMEN_ASSIGN_OR_RETURN(so.c_draft, args.get_float("--spec-draft-cost", 0.05, 0.0, 100.0));
    }
    if (args.has("--spec-verify-cost")) {
      LUMEN_ASSIGN_OR_RETURN(so.c_verify, args.get_float("--spec-verify-cost", 1.0, 0.0, 100.0));
    }
    o.speculative = so;
  }
  return o;
}

void print_presets() {
  std::printf("model presets (hidden / layers / heads / KV heads / head dim / ffn / vocab):\n");
  for (const ModelPreset& p : model_presets())
    std::printf("  %-15s %5d %3d %3d %3d %4d %6d %7d%s%s\n", p.name, p.n_embd, p.n_layer, p.n_head, p.n_kv_head,
                p.head_dim, p.n_ff, p.n_vocab, p.tied_output ? "  tied" : "", p.has_qkv_bias ? "  qkv-bias" : "");
  std::printf("hardware presets (published: bandwidth GB/s, memory GB, fp16 / fp16 tensor TFLOPS, int8 TOPS):\n");
  for (const HardwarePreset& p : hardware_presets())
    std::printf("  %-10s %7.0f %5.0f %8.2f %8.2f %8.2f  %s\n", p.name, p.bandwidth_gb_s, p.memory_gb, p.fp16_tflops,
                p.fp16_tensor_tflops, p.int8_tops, p.description);
  std::printf("  %-10s measured here: read bandwidth, f32 FMA and int8 dot-product rates, physical RAM\n", "this");
}

// The rates lumen itself runs at on a measured machine, as `lumen bench --vs-roofline` uses them.
std::optional<Prediction> lumen_prediction(const ModelInput& model, const Hardware& hw, const PlanOptions& o,
                                           double kv_bits) {
  if (!hw.measured || !model.file_weights) return std::nullopt;
  MachineRates rates;
  rates.read_bytes_per_s = hw.read_bytes_per_s;
  rates.flops_f32 = hw.flops_fp16;
  rates.ops_int8 = hw.ops_int8;
  PredictOptions po;
  po.n_prompt = o.n_prompt;
  po.kv_bytes_per_elem = kv_bits / 8.0;
  return predict_lumen(model.shape, *model.file_weights, rates, po);
}

// ArgParser's messages already start with "lumen roofline: ".
int report(const Status& st, int exit_code = 2) {
  const std::string& m = st.message();
  std::fprintf(stderr, "error: %s%s\n", m.starts_with("lumen ") ? "" : "lumen roofline: ", m.c_str());
  return exit_code;
}

}  // namespace

int cmd_roofline(int argc, char** argv, int first) {
  ArgParser args("roofline",
                 "lumen roofline (-m MODEL | --preset NAME) [--hw NAME|this] [--weights BITS] [--kv BITS] "
                 "[--prompt N] [--batch 1,8,32] [--units binary|si] [--json] [--plot FILE.svg]",
                 roofline_option_specs());
  if (Status st = args.parse(argc, argv, first); !st.ok()) return report(st);
  if (args.help_requested()) {
    std::fputs(args.help_text().c_str(), stdout);
    return 0;
  }
  if (args.has("--list")) {
    print_presets();
    return 0;
  }
  Result<Units> units = parse_units(args.get_or("--units", "si"), "--units");
  if (!units.ok()) return report(units.status());
  Result<ModelInput> model = load_model_input(args);
  if (!model.ok()) return report(model.status(), args.has("--model") && !args.has("--preset") ? 1 : 2);
  Result<PlanOptions> options = plan_options(args, *model, *units);
  if (!options.ok()) return report(options.status());
  Result<Hardware> hw = load_hardware(args, *units);
  if (!hw.ok()) return report(hw.status());
  if (!(hw->read_bytes_per_s > 0 && hw->flops_fp16 > 0 && hw->ops_int8 > 0)) {
    std::fprintf(stderr, "error: lumen roofline: the machine's rates could not be measured (bandwidth %g B/s)\n",
                 hw->read_bytes_per_s);
    return 1;
  }

  Plan plan = make_plan(model->shape, model->params, *hw, *options);
  if (model->file_weights) plan.params_source = "file tensors";
  const double kv_bits = plan.chosen().precision.kv_bits;
  const std::optional<Prediction> lumen = lumen_prediction(*model, *hw, *options, kv_bits);

  if (auto path = args.get("--plot")) {
    std::ofstream out(*path, std::ios::binary | std::ios::trunc);
    out << plan_to_svg(plan);
    if (!out.good()) {
      std::fprintf(stderr, "error: lumen roofline: --plot: cannot write '%s'\n", path->c_str());
      return 1;
    }
    if (!args.has("--json")) std::fprintf(stderr, "lumen roofline: wrote %s\n", path->c_str());
  }

  if (args.has("--json")) {
    nlohmann::json j = plan_to_json(plan);
    if (lumen)
      j["lumen_prediction"] = {{"threads", hw->n_threads},
                               {"pp_tokens", options->n_prompt},
                               {"pp_tok_s", lumen->pp_tok_s},
                               {"pp_binding", lumen->pp_binding_roof},
                               {"tg_tokens", 128},
                               {"tg_tok_s", lumen->tg_tok_s},
                               {"tg_binding", lumen->binding_roof},
                               {"weight_bytes_per_token", lumen->weight_bytes_per_token}};
    std::puts(j.dump(2).c_str());
    return 0;
  }
  std::fputs(plan_to_text(plan).c_str(), stdout);
  if (lumen) {
    std::printf("\nlumen on this machine (%d threads, tensors as stored, %g-bit KV), the bounds `lumen bench` is held to:\n",
                hw->n_threads, kv_bits);
    std::printf("  pp%lld %.1f tok/s (%s-bound) | tg128 %.1f tok/s (%s-bound, %s read per token)\n",
                static_cast<long long>(options->n_prompt), lumen->pp_tok_s, lumen->pp_binding_roof, lumen->tg_tok_s,
                lumen->binding_roof, format_bytes(lumen->weight_bytes_per_token, plan.units).c_str());
  }
  return 0;
}

}  // namespace lumen::cli
