// Prints, for each i-quant type, a hash of llama.cpp's dequantization of pseudo-random
// blocks: the golden values of IqGolden.DequantizeMatchesLlamaCpp (src/kernels/iq_test.cc).
// Not built by CMake. Compile by hand against a llama.cpp build, e.g.
//   cc -O1 tools/iq_dequant_golden.c -I$LLAMA/ggml/include -L$LLAMA/build/bin \
//      -lggml-base -Wl,-rpath,$LLAMA/build/bin -o /tmp/iq_golden && /tmp/iq_golden
//
// Blocks: bytes from a 64-bit LCG (x = x * 6364136223846793005 + 1442695040888963407, byte =
// x >> 56), seeded with the type id; then every fp16 d is set to 0x2e66 (0.1) -- except
// iq1_m, whose d lives in the top nibbles of its scales and stays random but finite (bit 14 of
// scales word 3, d's exponent MSB, cleared). Hash: FNV-1a 64 over the float bits.
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ggml.h"

static uint64_t lcg;
static uint8_t next_byte(void) {
  lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
  return (uint8_t)(lcg >> 56);
}

int main(void) {
  const enum ggml_type types[] = {GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS, GGML_TYPE_IQ3_S, GGML_TYPE_IQ3_XXS,
                                  GGML_TYPE_IQ2_S,  GGML_TYPE_IQ2_XS, GGML_TYPE_IQ2_XXS, GGML_TYPE_IQ1_S,
                                  GGML_TYPE_IQ1_M};
  enum { kElems = 4096 };
  static uint8_t buf[kElems * 2];
  static float out[kElems];
  // ggml_init fills the fp16 conversion table the dequantizers read.
  struct ggml_init_params params = {1024, NULL, true};
  ggml_free(ggml_init(params));
  for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); ++t) {
    const enum ggml_type type = types[t];
    const size_t bs = ggml_blck_size(type), bytes = ggml_type_size(type), nb = kElems / bs;
    lcg = (uint64_t)type;
    for (size_t i = 0; i < nb * bytes; ++i) buf[i] = next_byte();
    for (size_t b = 0; b < nb; ++b) {
      uint8_t* blk = buf + b * bytes;
      if (type == GGML_TYPE_IQ1_M) {
        blk[bytes - 1] &= 0xbf;
      } else {
        blk[0] = 0x66;
        blk[1] = 0x2e;
      }
    }
    ggml_get_type_traits(type)->to_float(buf, out, kElems);
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < kElems; ++i) {
      uint32_t u;
      memcpy(&u, &out[i], 4);
      for (int k = 0; k < 4; ++k) {
        h ^= (u >> (8 * k)) & 0xff;
        h *= 0x100000001b3ull;
      }
    }
    printf("%-8s 0x%016llx  y[0..3] = %g %g %g %g\n", ggml_type_name(type), (unsigned long long)h, out[0], out[1],
           out[2], out[3]);
  }
  return 0;
}
