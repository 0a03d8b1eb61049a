// Prints llama.cpp's (ggml's) results on pseudo-random blocks of each legacy, K and i-quant
// type, the golden values of KernelsGolden.* in src/kernels/golden_test.cc:
//   * a hash of to_float (the reference dequantizer) over 4096 elements;
//   * a hash of the activation row quantized by ggml-cpu's from_float for the type's
//     vec_dot_type (q8_0, q8_1 or q8_K), and the float bits of vec_dot of 4 weight rows of
//     1024 elements against it.
// Not built by CMake. Compile by hand against a llama.cpp build, e.g.
//   LLAMA=/work/peer/llama.cpp
//   cc -O1 tools/ggml_kernel_golden.c -I$LLAMA/ggml/include -L$LLAMA/build/bin \
//      -lggml-base -lggml-cpu -lggml -Wl,-rpath,$LLAMA/build/bin -o /tmp/kgold && /tmp/kgold
//
// Blocks: bytes from a 64-bit LCG (x = x * 6364136223846793005 + 1442695040888963407, byte =
// x >> 56) seeded with the type id; then the block's fp16 fields set: the first (d) to 0x2e66
// (0.1), the second (dmin / m) where there is one to 0x2a66 (0.05); iq1_m, whose d is spread
// over the top nibbles of its scales, keeps a random d made finite by clearing bit 6 of the
// block's last byte (d's exponent MSB). Activations: x[i] =
// (byte - 128) / 32 from the same LCG seeded with 1000 + type id. Hash: FNV-1a 64 over the
// bytes (of the floats' bits for to_float).
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ggml-cpu.h"
#include "ggml.h"

static uint64_t lcg;
static uint8_t next_byte(void) {
  lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
  return (uint8_t)(lcg >> 56);
}

static uint64_t fnv(const void* p, size_t n) {
  const uint8_t* b = (const uint8_t*)p;
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

struct TypeCase {
  enum ggml_type type;
  int f16_offsets[2];  // byte offsets of d and dmin / m in a block; -1: none (iq1_m: see top)
};

int main(void) {
  const struct TypeCase cases[] = {
      {GGML_TYPE_Q4_0, {0, -1}},    {GGML_TYPE_Q4_1, {0, 2}},    {GGML_TYPE_Q5_0, {0, -1}},
      {GGML_TYPE_Q5_1, {0, 2}},     {GGML_TYPE_Q8_0, {0, -1}},   {GGML_TYPE_Q2_K, {80, 82}},
      {GGML_TYPE_Q3_K, {108, -1}},  {GGML_TYPE_Q4_K, {0, 2}},    {GGML_TYPE_Q5_K, {0, 2}},
      {GGML_TYPE_Q6_K, {208, -1}},  {GGML_TYPE_IQ4_NL, {0, -1}}, {GGML_TYPE_IQ4_XS, {0, -1}},
      {GGML_TYPE_IQ3_S, {0, -1}},   {GGML_TYPE_IQ3_XXS, {0, -1}}, {GGML_TYPE_IQ2_S, {0, -1}},
      {GGML_TYPE_IQ2_XS, {0, -1}},  {GGML_TYPE_IQ2_XXS, {0, -1}}, {GGML_TYPE_IQ1_S, {0, -1}},
      {GGML_TYPE_IQ1_M, {-1, -1}},
  };
  enum { kElems = 4096, kRowElems = 1024 };
  static uint8_t buf[kElems * 2];
  static float out[kElems];
  static float x[kRowElems];
  static uint8_t xq[kRowElems * 2];
  struct ggml_init_params params = {1024, NULL, true};
  ggml_free(ggml_init(params));  // fills the fp16 table the reference code reads
  ggml_cpu_init();
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); ++c) {
    const enum ggml_type type = cases[c].type;
    const size_t bs = ggml_blck_size(type), bytes = ggml_type_size(type), nb = kElems / bs;
    lcg = (uint64_t)type;
    for (size_t i = 0; i < nb * bytes; ++i) buf[i] = next_byte();
    for (size_t b = 0; b < nb; ++b) {
      const uint16_t d = 0x2e66, m = 0x2a66;
      if (cases[c].f16_offsets[0] >= 0) memcpy(buf + b * bytes + cases[c].f16_offsets[0], &d, 2);
      if (cases[c].f16_offsets[1] >= 0) memcpy(buf + b * bytes + cases[c].f16_offsets[1], &m, 2);
      if (type == GGML_TYPE_IQ1_M) buf[b * bytes + bytes - 1] &= 0xbf;
    }
    ggml_get_type_traits(type)->to_float(buf, out, kElems);
    printf("{%s, 0x%016llxull, ", ggml_type_name(type), (unsigned long long)fnv(out, sizeof(out)));

    const struct ggml_type_traits_cpu* cpu = ggml_get_type_traits_cpu(type);
    lcg = 1000 + (uint64_t)type;
    for (int i = 0; i < kRowElems; ++i) x[i] = ((int)next_byte() - 128) / 32.0f;
    const struct ggml_type_traits_cpu* act = ggml_get_type_traits_cpu(cpu->vec_dot_type);
    act->from_float(x, xq, kRowElems);
    const size_t xq_bytes = ggml_row_size(cpu->vec_dot_type, kRowElems);
    printf("%s, 0x%016llxull, {", ggml_type_name(cpu->vec_dot_type), (unsigned long long)fnv(xq, xq_bytes));
    const size_t w_row = ggml_row_size(type, kRowElems);
    for (int r = 0; r < kElems / kRowElems; ++r) {
      float s;
      cpu->vec_dot(kRowElems, &s, 0, buf + r * w_row, 0, xq, 0, 1);
      uint32_t u;
      memcpy(&u, &s, 4);
      printf("0x%08x%s", u, r + 1 < kElems / kRowElems ? ", " : "}},");
    }
    printf("\n");
  }
  return 0;
}
