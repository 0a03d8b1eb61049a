// Writes src/convert/testdata/ggml_quants_v2.bin: the bytes ggml's quantizers produce for the
// rows and importance matrices of src/convert/testdata/quant_rows.h, for every type
// `lumen quantize` writes, without and with an importance matrix. quantize_ref_test.cc checks
// lumen's quantizers against it. Not built by CMake; compile by hand against a llama.cpp build:
//
//   LLAMA=/work/peer/llama.cpp
//   g++ -std=c++20 -O2 -I$LLAMA/ggml/include -Isrc tools/ggml_quant_vectors.cc \
//       -L$LLAMA/build/bin -lggml-base -Wl,-rpath,$LLAMA/build/bin -o /tmp/ggml_quant_vectors
//   /tmp/ggml_quant_vectors src/convert/testdata/ggml_quants_v2.bin
//
// Format (little-endian): "LQR2", then records until end of file:
//   u32 ggml_type, u32 row_kind, u32 imatrix_kind, u32 n_values, u32 n_bytes, n_bytes bytes
// Each record is one row of n_values quantized by ggml_quantize_chunk(type, row, dst, 0, 1,
// n_values, imatrix or NULL).
#include <cstdint>
#include <cstdio>
#include <vector>

#include "convert/testdata/quant_rows.h"
#include "ggml.h"

// The i-quants whose quantizers search a grid of codes (the 1-3 bit ones).
bool grid_search(ggml_type t) {
  return t == GGML_TYPE_IQ1_S || t == GGML_TYPE_IQ1_M || t == GGML_TYPE_IQ2_XXS || t == GGML_TYPE_IQ2_XS ||
         t == GGML_TYPE_IQ2_S || t == GGML_TYPE_IQ3_XXS || t == GGML_TYPE_IQ3_S;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT.bin\n", argv[0]);
    return 2;
  }
  // ggml_init fills ggml's fp16 -> f32 table, which the K quantizers read when they re-derive
  // levels from the rounded scales (llama-quantize has it filled; without it every scale
  // reads as 0).
  ggml_init_params params = {1 << 20, nullptr, false};
  ggml_free(ggml_init(params));
  std::FILE* f = std::fopen(argv[1], "wb");
  if (!f) return 1;
  std::fwrite("LQR2", 1, 4, f);
  const ggml_type types[] = {GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0,
                             GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K,
                             GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS,
                             GGML_TYPE_IQ3_XXS, GGML_TYPE_IQ3_S, GGML_TYPE_IQ1_S, GGML_TYPE_IQ1_M,
                             GGML_TYPE_IQ2_XXS, GGML_TYPE_IQ2_XS, GGML_TYPE_IQ2_S};
  const uint32_t row_kinds[] = {0, 1, 2, 4};
  constexpr int kN = 768;
  int n_records = 0;
  for (ggml_type t : types) {
    for (uint32_t kind : row_kinds) {
      for (uint32_t im_kind : {0u, 1u, 2u, 3u}) {
        if (t == GGML_TYPE_Q8_0 && im_kind != 0) continue;  // q8_0 ignores the imatrix
        if (ggml_quantize_requires_imatrix(t) && im_kind == 0) continue;  // iq1_s, iq2_xxs, iq2_xs
        // Zero-weight columns (ties between grid neighbours): for the types with a grid search.
        if (im_kind == 3 && !grid_search(t)) continue;
        const std::vector<float> x = lumen::convert::testdata::make_row(kind, kN);
        const std::vector<float> w = lumen::convert::testdata::make_imatrix(im_kind, kN);
        std::vector<uint8_t> out(ggml_row_size(t, kN));
        const size_t n = ggml_quantize_chunk(t, x.data(), out.data(), 0, 1, kN, w.empty() ? nullptr : w.data());
        const uint32_t hdr[5] = {static_cast<uint32_t>(t), kind, im_kind, static_cast<uint32_t>(kN),
                                 static_cast<uint32_t>(n)};
        std::fwrite(hdr, sizeof(hdr), 1, f);
        std::fwrite(out.data(), 1, n, f);
        ++n_records;
      }
    }
  }
  std::fclose(f);
  std::printf("%d records\n", n_records);
  return 0;
}
