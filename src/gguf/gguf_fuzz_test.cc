// Fuzz-style robustness tests: truncated, bit-flipped and field-overwritten variants of
// the real model files. Every variant must either parse (and then every tensor view lies
// inside the buffer) or fail with a non-empty message; ASan/UBSan catch the rest.
// Each variant lives in its own exactly-sized heap buffer so ASan sees any overread.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "gguf/gguf_test_util.h"
#include "gguf/model_file.h"
#include "gguf/safetensors.h"

namespace lumen::gguf {
namespace {

using Bytes = std::vector<std::byte>;

struct Tally {
  int n_ok = 0;
  int n_error = 0;
};

void check_gguf(const Bytes& img, Tally* tally, const std::string& label) {
  auto r = parse_gguf(img, "fuzz");
  if (r.ok()) {
    const std::span<const std::byte> bufs[] = {img};
    ASSERT_TRUE(testing::views_within(*r, bufs)) << label;
    ++tally->n_ok;
  } else {
    ASSERT_FALSE(r.message().empty()) << label;
    ++tally->n_error;
  }
}

void check_safetensors(const Bytes& img, Tally* tally, const std::string& label) {
  auto r = parse_safetensors(img, "fuzz");
  if (r.ok()) {
    for (const SafetensorsTensor& t : r->tensors) {
      ASSERT_GE(t.data.data(), img.data()) << label;
      ASSERT_LE(t.data.data() + t.data.size(), img.data() + img.size()) << label;
    }
    ++tally->n_ok;
  } else {
    ASSERT_FALSE(r.message().empty()) << label;
    ++tally->n_error;
  }
}

void check_llama2c(const Bytes& img, Tally* tally, const std::string& label) {
  auto r = parse_llama2c(img, "fuzz");
  if (r.ok()) {
    const std::span<const std::byte> bufs[] = {img};
    ASSERT_TRUE(testing::views_within(*r, bufs)) << label;
    ++tally->n_ok;
  } else {
    ASSERT_FALSE(r.message().empty()) << label;
    ++tally->n_error;
  }
}

Bytes prefix(const Bytes& b, size_t n) { return Bytes(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(n)); }

// Truncation lengths: every length up to `dense`, then a stride through the rest.
std::vector<size_t> truncation_lengths(size_t size, size_t dense, size_t header_end, std::mt19937_64& rng) {
  std::vector<size_t> out;
  for (size_t n = 0; n < std::min(size, dense); ++n) out.push_back(n);
  for (size_t n = dense; n < std::min(size, header_end + 64); n += 37) out.push_back(n);
  for (int i = 0; i < 40; ++i) out.push_back(rng() % size);
  out.push_back(size - 1);
  return out;
}

// Offsets (and widths) of the structural fields of a GGUF image: counts, lengths, types,
// dims, offsets. Only the first and last few elements of long string arrays are listed.
struct Field {
  size_t at;
  int width;  // 4 or 8
};

class GgufWalker {
 public:
  explicit GgufWalker(const Bytes& b) : b_(b) {}
  std::vector<Field> walk() {
    pos_ = 4;
    field(4);  // version
    const uint64_t n_tensors = field(8);
    const uint64_t n_kv = field(8);
    for (uint64_t i = 0; i < n_kv; ++i) {
      str();
      value(static_cast<uint32_t>(field(4)));
    }
    for (uint64_t i = 0; i < n_tensors; ++i) {
      // Tensor infos all look alike: a sample of them keeps the run time small.
      const bool record = i < 2 || i + 1 == n_tensors || i % 7 == 3;
      str(record);
      const uint64_t n_dims = field(4, record);
      for (uint64_t d = 0; d < n_dims; ++d) field(8, record);
      field(4, record);  // type
      field(8, record);  // offset
    }
    header_end_ = pos_;
    return fields_;
  }
  size_t header_end() const { return header_end_; }

 private:
  uint64_t read(int width) {
    uint64_t v = 0;
    std::memcpy(&v, b_.data() + pos_, width);
    pos_ += width;
    return v;
  }
  uint64_t field(int width, bool record = true) {
    if (record) fields_.push_back({pos_, width});
    return read(width);
  }
  void str(bool record = true) { pos_ += field(8, record); }
  void value(uint32_t type) {
    static constexpr int kSizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (type == 8) {
      str();
    } else if (type == 9) {
      const uint32_t elem = static_cast<uint32_t>(field(4));
      const uint64_t count = field(8);
      for (uint64_t i = 0; i < count; ++i) {
        if (elem == 8) str(i < 3 || i + 1 == count);
        else pos_ += kSizes[elem];
      }
    } else {
      pos_ += kSizes[type];
    }
  }
  const Bytes& b_;
  size_t pos_ = 0;
  size_t header_end_ = 0;
  std::vector<Field> fields_;
};

void put(Bytes& b, const Field& f, uint64_t v) { std::memcpy(b.data() + f.at, &v, f.width); }

std::vector<uint64_t> hostile_values(size_t file_size) {
  return {0, 1, 3, 13, 0xFF, 0x7FFFFFFF, 0xFFFFFFFF, uint64_t{1} << 32, uint64_t{1} << 60, uint64_t{1} << 63,
          ~uint64_t{0}, file_size + 1, file_size / 2};
}

void fuzz_gguf_file(const std::string& path) {
  const Bytes orig = testing::read_bytes(path);
  ASSERT_FALSE(orig.empty()) << path;
  GgufWalker walker(orig);
  const std::vector<Field> fields = walker.walk();
  std::mt19937_64 rng(0x6c756d656e);  // fixed seed: failures reproduce
  Tally tally;
  check_gguf(orig, &tally, "original");
  ASSERT_EQ(tally.n_ok, 1);

  for (size_t n : truncation_lengths(orig.size(), 600, walker.header_end(), rng))
    check_gguf(prefix(orig, n), &tally, "truncated to " + std::to_string(n));

  // One exactly-sized working copy, mutated and restored per variant (copying the whole
  // file per variant would dominate the run time under ASan).
  Bytes img = orig;
  auto restore = [&](size_t at, size_t n) { std::memcpy(img.data() + at, orig.data() + at, n); };
  for (const Field& f : fields) {
    for (uint64_t v : hostile_values(orig.size())) {
      put(img, f, v);
      check_gguf(img, &tally, "field at " + std::to_string(f.at) + " = " + std::to_string(v));
      restore(f.at, f.width);
    }
  }
  // Random bit flips, mostly inside the header, sometimes anywhere.
  for (int i = 0; i < 400; ++i) {
    const int n_flips = 1 + static_cast<int>(rng() % 8);
    std::vector<size_t> flipped;
    for (int k = 0; k < n_flips; ++k) {
      const size_t region = (i % 4 == 0) ? img.size() : walker.header_end();
      const size_t at = rng() % region;
      img[at] ^= static_cast<std::byte>(1u << (rng() % 8));
      flipped.push_back(at);
    }
    check_gguf(img, &tally, "bit flips #" + std::to_string(i));
    for (size_t at : flipped) restore(at, 1);
  }
  // Random values of structural fields.
  for (int i = 0; i < 200; ++i) {
    const Field& f = fields[rng() % fields.size()];
    put(img, f, rng());
    check_gguf(img, &tally, "random field value #" + std::to_string(i));
    restore(f.at, f.width);
  }
  ASSERT_EQ(img, orig);
  EXPECT_GT(tally.n_error, 100);
  std::printf("%s: %d variants parsed, %d rejected\n", path.c_str(), tally.n_ok, tally.n_error);
}

TEST(GgufFuzz, Stories260k) { fuzz_gguf_file(testing::stories260k_dir() + "/stories260K.gguf"); }

TEST(GgufFuzz, TinyStories656kQ8) {
  fuzz_gguf_file(testing::tinystories656k_dir() + "/TinyStories-656K-Q8_0.gguf");
}

// llama.cpp-quantized files of the i-quant types and a mix with iq4_nl fallbacks
// (tests/data/iq): their tensor sizes come from the types' DType rows, so a truncated
// super-block is a clear error.
TEST(GgufFuzz, IquantFiles) {
  for (const char* name : {"iq4_xs", "iq1_m", "q3_k_m-h160"})
    fuzz_gguf_file(std::string(LUMEN_TEST_DATA_DIR) + "/iq/" + name + "/model.gguf");
}

// Hand-made hostile images that random mutation rarely reaches.
TEST(GgufFuzz, HandMadeHostileImages) {
  auto header = [](uint64_t n_tensors, uint64_t n_kv) {
    Bytes b(24);
    std::memcpy(b.data(), "GGUF", 4);
    const uint32_t version = 3;
    std::memcpy(b.data() + 4, &version, 4);
    std::memcpy(b.data() + 8, &n_tensors, 8);
    std::memcpy(b.data() + 16, &n_kv, 8);
    return b;
  };
  auto append = [](Bytes& b, const void* p, size_t n) {
    const auto* c = static_cast<const std::byte*>(p);
    b.insert(b.end(), c, c + n);
  };
  auto append_u32 = [&](Bytes& b, uint32_t v) { append(b, &v, 4); };
  auto append_u64 = [&](Bytes& b, uint64_t v) { append(b, &v, 8); };
  Tally tally;
  {  // arrays nested 10000 deep: rejected at the depth limit, no stack overflow
    Bytes b = header(0, 1);
    append_u64(b, 1);
    append(b, "k", 1);
    append_u32(b, 9);
    for (int i = 0; i < 10000; ++i) {
      append_u32(b, 9);
      append_u64(b, 1);
    }
    check_gguf(b, &tally, "deep nesting");
  }
  {  // an array of many empty nested arrays: parsed, exposed as empty
    Bytes b = header(0, 1);
    append_u64(b, 1);
    append(b, "k", 1);
    append_u32(b, 9);
    append_u32(b, 9);
    append_u64(b, 1000);
    for (int i = 0; i < 1000; ++i) {
      append_u32(b, 0);
      append_u64(b, 0);
    }
    auto r = parse_gguf(b, "nested");
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_EQ(r->find("k")->array_size(), 0u);
  }
  {  // a string array claiming 2^60 elements of 0-length strings
    Bytes b = header(0, 1);
    append_u64(b, 1);
    append(b, "k", 1);
    append_u32(b, 9);
    append_u32(b, 8);
    append_u64(b, uint64_t{1} << 60);
    append_u64(b, 0);
    check_gguf(b, &tally, "huge string array");
  }
  {  // tensors that overlap each other and share data are allowed; views stay in bounds
    Bytes b = header(2, 0);
    for (const char* name : {"a", "b"}) {
      append_u64(b, 1);
      append(b, name, 1);
      append_u32(b, 1);
      append_u64(b, 8);
      append_u32(b, 0);
      append_u64(b, 0);
    }
    b.resize(128 + 32, std::byte{0});
    check_gguf(b, &tally, "shared data");
    EXPECT_EQ(tally.n_ok, 1);
  }
  EXPECT_GE(tally.n_error, 2);
}

// --- safetensors ---

TEST(SafetensorsFuzz, TinyStories656k) {
  const Bytes orig = testing::read_bytes(testing::tinystories656k_dir() + "/model.safetensors");
  ASSERT_FALSE(orig.empty());
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, orig.data(), 8);
  const size_t header_end = 8 + header_bytes;
  std::mt19937_64 rng(0x7361666574);
  Tally tally;
  check_safetensors(orig, &tally, "original");
  ASSERT_EQ(tally.n_ok, 1);
  for (size_t n : truncation_lengths(orig.size(), header_end + 8, header_end, rng))
    check_safetensors(prefix(orig, n), &tally, "truncated to " + std::to_string(n));
  Bytes img = orig;  // mutated in the header, restored after each variant
  for (uint64_t v : hostile_values(orig.size())) {
    std::memcpy(img.data(), &v, 8);
    check_safetensors(img, &tally, "header length " + std::to_string(v));
    std::memcpy(img.data(), orig.data(), 8);
  }
  // Bit flips in the JSON header.
  for (int i = 0; i < 300; ++i) {
    const int n_flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < n_flips; ++k) img[8 + rng() % header_bytes] ^= static_cast<std::byte>(1u << (rng() % 8));
    check_safetensors(img, &tally, "bit flips #" + std::to_string(i));
    std::memcpy(img.data(), orig.data(), header_end);
  }
  // Numbers in the header (shapes, offsets) replaced by hostile ones of the same width
  // or by other digits, keeping the JSON well-formed.
  const std::string header(reinterpret_cast<const char*>(orig.data() + 8), header_bytes);
  std::vector<std::pair<size_t, size_t>> numbers;  // [start, length)
  for (size_t i = 0; i < header.size();) {
    if (std::isdigit(static_cast<unsigned char>(header[i]))) {
      size_t j = i;
      while (j < header.size() && std::isdigit(static_cast<unsigned char>(header[j]))) ++j;
      numbers.emplace_back(i, j - i);
      i = j;
    } else {
      ++i;
    }
  }
  ASSERT_GT(numbers.size(), 50u);
  const char* replacements[] = {"0", "1", "4", "18446744073709551615", "18446744073709551616", "9223372036854775807",
                                "4294967296", "1e308", "-1", "2.5", "null", "\"x\"", "[]", "{}"};
  for (size_t idx = 0; idx < numbers.size(); ++idx) {
    for (const char* rep : replacements) {
      if (idx % 3 != 0 && rng() % 4 != 0) continue;  // a sample: keep the run time small
      std::string h = header;
      h.replace(numbers[idx].first, numbers[idx].second, rep);
      // The data section only matters through its size: keep a 1/16 tail so that the
      // replaced offsets still hit both in- and out-of-bounds cases cheaply.
      const size_t data_bytes = orig.size() - header_end;
      Bytes v(8 + h.size());
      const uint64_t n = h.size();
      std::memcpy(v.data(), &n, 8);
      std::memcpy(v.data() + 8, h.data(), h.size());
      v.resize(v.size() + (idx % 2 ? data_bytes : data_bytes / 16));
      check_safetensors(v, &tally, "number #" + std::to_string(idx) + " -> " + rep);
    }
  }
  EXPECT_GT(tally.n_error, 100);
  std::printf("safetensors: %d variants parsed, %d rejected\n", tally.n_ok, tally.n_error);
}

// The directory reader on corrupted copies: truncated weights and mutated config.json.
TEST(SafetensorsFuzz, HfDirectoryVariants) {
  const std::string src = testing::tinystories656k_dir();
  const Bytes weights = testing::read_bytes(src + "/model.safetensors");
  const Bytes config = testing::read_bytes(src + "/config.json");
  testing::TempDir dir;
  std::mt19937_64 rng(0x6866646972);
  int n_ok = 0, n_error = 0;
  auto check = [&](const std::string& label) {
    auto r = open_hf_dir(dir.path());
    if (r.ok()) {
      ++n_ok;
      for (const TensorInfo& t : r->tensors()) ASSERT_NE(t.view.data, nullptr) << label;
    } else {
      ++n_error;
      ASSERT_FALSE(r.message().empty()) << label;
    }
  };
  testing::write_bytes(dir.file("config.json"), config);
  for (size_t n : {size_t{0}, size_t{7}, size_t{8}, size_t{100}, size_t{2167}, size_t{2168}, size_t{5000},
                   weights.size() - 1}) {
    testing::write_bytes(dir.file("model.safetensors"), prefix(weights, n));
    check("weights truncated to " + std::to_string(n));
  }
  testing::write_bytes(dir.file("model.safetensors"), weights);
  for (int i = 0; i < 150; ++i) {
    Bytes c = config;
    const int n_flips = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < n_flips; ++k) c[rng() % c.size()] ^= static_cast<std::byte>(1u << (rng() % 8));
    testing::write_bytes(dir.file("config.json"), c);
    check("config bit flips #" + std::to_string(i));
  }
  for (size_t n = 0; n < config.size(); n += 13) {
    testing::write_bytes(dir.file("config.json"), prefix(config, n));
    check("config truncated to " + std::to_string(n));
  }
  EXPECT_GT(n_error, 50);
  EXPECT_GT(n_ok, 0);
}

// --- llama2.c ---

TEST(Llama2cFuzz, Stories260kCheckpoint) {
  const Bytes orig = testing::read_bytes(testing::stories260k_dir() + "/stories260K.bin");
  ASSERT_FALSE(orig.empty());
  std::mt19937_64 rng(0x6c6c616d61);
  Tally tally;
  check_llama2c(orig, &tally, "original");
  ASSERT_EQ(tally.n_ok, 1);
  for (size_t n : truncation_lengths(orig.size(), 64, 28, rng))
    check_llama2c(prefix(orig, n), &tally, "truncated to " + std::to_string(n));
  const int32_t values[] = {0, 1, -1, 2, 3, 7, 64, 512, -512, 0x7FFFFFFF, INT32_MIN, 65536, 65537, 1 << 22};
  Bytes img = orig;  // mutated in the header, restored after each variant
  for (int field = 0; field < 7; ++field) {
    for (int32_t v : values) {
      std::memcpy(img.data() + field * 4, &v, 4);
      check_llama2c(img, &tally, "header field " + std::to_string(field) + " = " + std::to_string(v));
      std::memcpy(img.data(), orig.data(), 28);
    }
  }
  for (int i = 0; i < 200; ++i) {
    const int n_flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < n_flips; ++k) img[rng() % 28] ^= static_cast<std::byte>(1u << (rng() % 8));
    check_llama2c(img, &tally, "header bit flips #" + std::to_string(i));
    std::memcpy(img.data(), orig.data(), 28);
  }
  EXPECT_GT(tally.n_error, 100);
}

TEST(Llama2cFuzz, Tokenizer) {
  const Bytes orig = testing::read_bytes(testing::stories260k_dir() + "/tok512.bin");
  ASSERT_FALSE(orig.empty());
  std::mt19937_64 rng(0x746f6b);
  int n_ok = 0, n_error = 0;
  auto check = [&](const Bytes& img, int64_t vocab, const std::string& label) {
    ModelFile file;
    Status s = parse_llama2c_tokenizer(img, "fuzz", vocab, &file);
    if (s.ok()) {
      ++n_ok;
      ASSERT_EQ(file.get_string_array("tokenizer.ggml.tokens")->size(), static_cast<size_t>(vocab)) << label;
    } else {
      ++n_error;
      ASSERT_FALSE(s.message().empty()) << label;
    }
  };
  check(orig, 512, "original");
  ASSERT_EQ(n_ok, 1);
  for (size_t n = 0; n < orig.size(); n += (n < 256 ? 1 : 7)) check(prefix(orig, n), 512, "truncated");
  for (int i = 0; i < 300; ++i) {
    Bytes img = orig;
    const int n_flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < n_flips; ++k) img[rng() % img.size()] ^= static_cast<std::byte>(1u << (rng() % 8));
    check(img, 512, "bit flips #" + std::to_string(i));
  }
  for (int64_t vocab : {int64_t{0}, int64_t{-1}, int64_t{1}, int64_t{511}, int64_t{513}, int64_t{1} << 40}) check(orig, vocab, "vocab");
  EXPECT_GT(n_error, 100);
}

}  // namespace
}  // namespace lumen::gguf
