#include "convert/gguf_stream.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iterator>

#include "gguf/gguf_writer.h"

namespace lumen::convert {
namespace {

using gguf::MetaValue;
using gguf::ValueType;

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "lumen_convert_" + std::to_string(::getpid()) + "_" + name;
}

std::vector<std::byte> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(c.size());
  if (!c.empty()) std::memcpy(out.data(), c.data(), c.size());
  return out;
}

std::vector<std::byte> pattern(size_t n, int seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 31 + seed) & 0xFF);
  return v;
}

// The streaming writer lays a file out exactly as gguf::GgufWriter does.
TEST(ConvertGgufStream, SameBytesAsGgufWriter) {
  for (uint32_t alignment : {32u, 64u}) {
    gguf::GgufWriter ref(alignment);
    GgufStreamWriter w(alignment);
    const std::pair<std::string, MetaValue> meta[] = {
        {"general.architecture", MetaValue::of_string("llama")},
        {"llama.block_count", MetaValue::of_u32(2)},
        {"llama.rope.freq_base", MetaValue::of_f32(10000.0f)},
        {"general.flag", MetaValue::of_bool(true)},
        {"x.i64", MetaValue::of_int(ValueType::kI64, -5)},
        {"x.f64", MetaValue::of_float(ValueType::kF64, 0.25)},
        {"tokenizer.ggml.tokens", MetaValue::of_string_array({"a", "", "ccc"})},
        {"tokenizer.ggml.scores", MetaValue::of_float_array(ValueType::kF32, {-1.0, 2.5})},
        {"tokenizer.ggml.token_type", MetaValue::of_int_array(ValueType::kI32, {1, 3, 6})},
        {"x.bools", MetaValue::of_int_array(ValueType::kBool, {1, 0})},
    };
    for (const auto& [k, v] : meta) {
      ref.set(k, v);
      w.set(k, v);
    }
    const auto a = pattern(64 * 4, 1), b = pattern(34 * 3, 2), c = pattern(7 * 4, 3);
    ASSERT_TRUE(ref.add_tensor("a", DType::kF32, {64}, a).ok());
    ASSERT_TRUE(ref.add_tensor("b", DType::kQ8_0, {32, 3}, b).ok());
    ASSERT_TRUE(ref.add_tensor("c", DType::kF32, {7}, c).ok());
    ASSERT_TRUE(w.add_tensor("a", DType::kF32, {64}).ok());
    ASSERT_TRUE(w.add_tensor("b", DType::kQ8_0, {32, 3}).ok());
    ASSERT_TRUE(w.add_tensor("c", DType::kF32, {7}).ok());
    const std::vector<std::byte> want = ref.serialize();
    const std::string path = temp_path("stream.gguf");
    const std::vector<std::byte>* data[] = {&a, &b, &c};
    Status st = w.write_file(path, [&](size_t i, TensorSink& sink) {
      // Write in two pieces to check the sink appends.
      const auto& d = *data[i];
      sink.write(d.data(), d.size() / 2);
      sink.write(d.data() + d.size() / 2, d.size() - d.size() / 2);
      return Status();
    });
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(read_all(path), want) << "alignment " << alignment;
    EXPECT_EQ(w.file_bytes(), want.size());
    std::remove(path.c_str());
  }
}

TEST(ConvertGgufStream, RejectsBadTensorsAndCleansUp) {
  GgufStreamWriter w;
  EXPECT_FALSE(w.add_tensor("q", DType::kQ4_K, {128, 2}).ok());  // 128 is not a multiple of 256
  ASSERT_TRUE(w.add_tensor("t", DType::kF32, {4}).ok());
  const Status dup = w.add_tensor("t", DType::kF32, {4});
  EXPECT_FALSE(dup.ok());
  EXPECT_NE(dup.message().find("duplicate tensor 't'"), std::string::npos) << dup.message();

  const std::string path = temp_path("short.gguf");
  const float x[3] = {1, 2, 3};
  Status st = w.write_file(path, [&](size_t, TensorSink& sink) {
    sink.write(x, sizeof(x));  // one float short
    return Status();
  });
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("produced 12 bytes, expected 16"), std::string::npos) << st.message();
  EXPECT_NE(::access(path.c_str(), F_OK), 0);
  EXPECT_NE(::access((path + ".tmp").c_str(), F_OK), 0);

  st = w.write_file(path, [&](size_t, TensorSink&) { return error("producer failed"); });
  EXPECT_EQ(st.message(), "producer failed");
  EXPECT_NE(::access((path + ".tmp").c_str(), F_OK), 0);
}

}  // namespace
}  // namespace lumen::convert
