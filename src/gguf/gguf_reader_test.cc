#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "gguf/gguf_test_util.h"
#include "gguf/gguf_writer.h"
#include "gguf/model_file.h"

namespace lumen::gguf {
namespace {

using testing::read_bytes;

std::span<const std::byte> as_bytes_of(const std::vector<float>& v) {
  return std::as_bytes(std::span<const float>(v));
}

TEST(GgufReader, Stories260kMetadata) {
  auto file = open_gguf(testing::stories260k_dir() + "/stories260K.gguf");
  ASSERT_TRUE(file.ok()) << file.message();
  EXPECT_EQ(file->container(), "gguf");
  EXPECT_EQ(file->gguf_version(), 3u);
  EXPECT_EQ(file->get_string("general.architecture"), "llama");
  EXPECT_EQ(file->get_int("llama.embedding_length"), 64);
  EXPECT_EQ(file->get_int("llama.block_count"), 5);
  EXPECT_EQ(file->get_int("llama.attention.head_count"), 8);
  EXPECT_EQ(file->get_int("llama.attention.head_count_kv"), 4);
  EXPECT_EQ(file->get_int("llama.feed_forward_length"), 172);
  EXPECT_NEAR(*file->get_float("llama.attention.layer_norm_rms_epsilon"), 1e-5, 1e-9);
  // u32 0xFFFFFFFF stays an unsigned value.
  EXPECT_EQ(file->get_int("tokenizer.ggml.padding_token_id"), 0xFFFFFFFFll);
  ASSERT_NE(file->get_string_array("tokenizer.ggml.tokens"), nullptr);
  EXPECT_EQ(file->get_string_array("tokenizer.ggml.tokens")->size(), 512u);
  EXPECT_EQ((*file->get_string_array("tokenizer.ggml.tokens"))[3], "<0x00>");
  ASSERT_NE(file->get_float_array("tokenizer.ggml.scores"), nullptr);
  EXPECT_EQ(file->get_float_array("tokenizer.ggml.scores")->size(), 512u);
  ASSERT_NE(file->get_int_array("tokenizer.ggml.token_type"), nullptr);
  EXPECT_EQ((*file->get_int_array("tokenizer.ggml.token_type"))[0], 2);
  // Wrong-kind accessors give nothing.
  EXPECT_EQ(file->get_int("general.architecture"), std::nullopt);
  EXPECT_EQ(file->get_string_array("tokenizer.ggml.scores"), nullptr);
  EXPECT_EQ(file->get_float_array("tokenizer.ggml.tokens"), nullptr);
  EXPECT_EQ(file->find("no.such.key"), nullptr);

  EXPECT_EQ(file->tensors().size(), 48u);
  const TensorInfo* q = file->find_tensor("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->view.dtype, DType::kF32);
  EXPECT_EQ(q->view.n_dims, 2);
  EXPECT_EQ(q->view.ne[0], 64);
  EXPECT_EQ(q->view.ne[1], 64);
  EXPECT_EQ(q->view.n_bytes, 64u * 64u * 4u);
  const TensorInfo* k = file->find_tensor("blk.4.attn_k.weight");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->view.ne[0], 64);
  EXPECT_EQ(k->view.ne[1], 32);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(q->view.data) % 32, 0u);
  EXPECT_EQ(file->find_tensor("nope"), nullptr);
}

TEST(GgufReader, TinyStories656kQ8) {
  auto file = open_gguf(testing::tinystories656k_dir() + "/TinyStories-656K-Q8_0.gguf");
  ASSERT_TRUE(file.ok()) << file.message();
  int n_q8 = 0, n_f32 = 0;
  for (const TensorInfo& t : file->tensors()) {
    n_q8 += t.view.dtype == DType::kQ8_0;
    n_f32 += t.view.dtype == DType::kF32;
  }
  EXPECT_EQ(n_q8, 15);
  EXPECT_EQ(n_f32, 5);
  EXPECT_EQ(file->get_int("llama.embedding_length"), 128);
  EXPECT_EQ(file->get_int("llama.vocab_size"), 2048);
  EXPECT_EQ(file->get_bool("tokenizer.ggml.add_bos_token"), true);
  EXPECT_EQ(file->get_string_array("general.languages")->at(0), "en");
  EXPECT_NEAR(*file->get_float("llama.rope.freq_base"), 10000.0, 1e-9);
  const TensorInfo* e = file->find_tensor("token_embd.weight");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->view.n_bytes, 2048u / 32 * 34 * 128);
}

TEST(GgufReader, OpenModelDetectsGguf) {
  auto file = open_model(testing::stories260k_dir() + "/stories260K.gguf");
  ASSERT_TRUE(file.ok()) << file.message();
  EXPECT_EQ(file->container(), "gguf");
  auto missing = open_model("/nonexistent/model.gguf");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("/nonexistent/model.gguf"), std::string::npos);
}

TEST(GgufWriter, RoundTripEveryMetadataType) {
  GgufWriter w(64);
  w.set("t.u8", MetaValue::of_int(ValueType::kU8, 200));
  w.set("t.i8", MetaValue::of_int(ValueType::kI8, -100));
  w.set("t.u16", MetaValue::of_int(ValueType::kU16, 60000));
  w.set("t.i16", MetaValue::of_int(ValueType::kI16, -30000));
  w.set("t.u32", MetaValue::of_u32(4000000000u));
  w.set("t.i32", MetaValue::of_i32(-2000000000));
  w.set("t.u64", MetaValue::of_u64(0xFFFFFFFFFFFFFFFFull));
  w.set("t.i64", MetaValue::of_int(ValueType::kI64, -(int64_t{1} << 62)));
  w.set("t.f32", MetaValue::of_f32(1.5f));
  w.set("t.f64", MetaValue::of_float(ValueType::kF64, 3.25e100));
  w.set("t.bool", MetaValue::of_bool(true));
  w.set("t.str", MetaValue::of_string(std::string("h\0llo", 5)));
  w.set("t.empty_str", MetaValue::of_string(""));
  w.set("t.arr_str", MetaValue::of_string_array({"a", "", "\xe2\x96\x81the"}));
  w.set("t.arr_f32", MetaValue::of_float_array(ValueType::kF32, {0.5, -1000.0}));
  w.set("t.arr_f64", MetaValue::of_float_array(ValueType::kF64, {1e300}));
  w.set("t.arr_bool", MetaValue::of_int_array(ValueType::kBool, {1, 0, 1}));
  w.set("t.arr_empty", MetaValue::of_int_array(ValueType::kI32, {}));
  const std::vector<ValueType> int_types = {ValueType::kU8, ValueType::kI8, ValueType::kU16, ValueType::kI16,
                                            ValueType::kU32, ValueType::kI32, ValueType::kU64, ValueType::kI64};
  for (ValueType t : int_types)
    w.set("t.arr_" + std::string(value_type_name(t)), MetaValue::of_int_array(t, {0, 1, 100}));
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  std::vector<float> b(32 * 3, 0.25f);
  ASSERT_TRUE(w.add_tensor("a", DType::kF32, {3, 2}, as_bytes_of(a)).ok());
  ASSERT_TRUE(w.add_tensor_copy("b", DType::kF32, {32, 3}, as_bytes_of(b)).ok());
  std::vector<std::byte> q8(34 * 2, std::byte{7});
  ASSERT_TRUE(w.add_tensor("c", DType::kQ8_0, {64}, q8).ok());
  EXPECT_FALSE(w.add_tensor("a", DType::kF32, {3, 2}, as_bytes_of(a)).ok());   // duplicate
  EXPECT_FALSE(w.add_tensor("d", DType::kF32, {4, 2}, as_bytes_of(a)).ok());   // size mismatch
  EXPECT_FALSE(w.add_tensor("e", DType::kQ8_0, {33}, q8).ok());                // not a block multiple

  const std::vector<std::byte> image = w.serialize();
  auto file = parse_gguf(image, "memory");
  ASSERT_TRUE(file.ok()) << file.message();
  EXPECT_EQ(file->get_int("t.u8"), 200);
  EXPECT_EQ(file->find("t.u8")->type, ValueType::kU8);
  EXPECT_EQ(file->get_int("t.i8"), -100);
  EXPECT_EQ(file->get_int("t.u16"), 60000);
  EXPECT_EQ(file->get_int("t.i16"), -30000);
  EXPECT_EQ(file->get_int("t.u32"), 4000000000ll);
  EXPECT_EQ(file->get_int("t.i32"), -2000000000);
  EXPECT_EQ(static_cast<uint64_t>(*file->get_int("t.u64")), 0xFFFFFFFFFFFFFFFFull);
  EXPECT_EQ(file->find("t.u64")->type, ValueType::kU64);
  EXPECT_EQ(file->get_int("t.i64"), -(int64_t{1} << 62));
  EXPECT_EQ(file->get_float("t.f32"), 1.5);
  EXPECT_EQ(file->get_float("t.f64"), 3.25e100);
  EXPECT_EQ(file->get_bool("t.bool"), true);
  EXPECT_EQ(file->get_int("t.bool"), 1);
  EXPECT_EQ(file->get_string("t.str"), std::string_view("h\0llo", 5));
  EXPECT_EQ(file->get_string("t.empty_str"), "");
  EXPECT_EQ(*file->get_string_array("t.arr_str"), (std::vector<std::string>{"a", "", "\xe2\x96\x81the"}));
  EXPECT_EQ(*file->get_float_array("t.arr_f32"), (std::vector<double>{0.5, -1000.0}));
  EXPECT_EQ(*file->get_float_array("t.arr_f64"), (std::vector<double>{1e300}));
  EXPECT_EQ(*file->get_int_array("t.arr_bool"), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(file->find("t.arr_empty")->array_size(), 0u);
  EXPECT_EQ(file->find("t.arr_empty")->array_type, ValueType::kI32);
  for (ValueType t : int_types) {
    const MetaValue* v = file->find("t.arr_" + std::string(value_type_name(t)));
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(v->array_type, t);
    EXPECT_EQ(v->arr_int, (std::vector<int64_t>{0, 1, 100}));
  }
  EXPECT_EQ(file->get_int("general.alignment"), 64);
  ASSERT_EQ(file->tensors().size(), 3u);
  const TensorInfo* ta = file->find_tensor("a");
  ASSERT_NE(ta, nullptr);
  EXPECT_EQ(ta->view.ne[0], 3);
  EXPECT_EQ(ta->view.ne[1], 2);
  EXPECT_EQ(std::memcmp(ta->view.data, a.data(), 24), 0);
  const TensorInfo* tb = file->find_tensor("b");
  EXPECT_EQ((tb->view.data - image.data()) % 64, 0);
  EXPECT_EQ(std::memcmp(tb->view.data, b.data(), b.size() * 4), 0);
  EXPECT_EQ(file->find_tensor("c")->view.dtype, DType::kQ8_0);
  EXPECT_EQ(file->find_tensor("c")->view.n_bytes, 68u);
  EXPECT_EQ(file->data_bytes(), 24u + 384u + 68u);
}

TEST(GgufWriter, WriteFileMatchesSerialize) {
  testing::TempDir dir;
  GgufWriter w;
  w.set("general.architecture", MetaValue::of_string("llama"));
  std::vector<float> a(1000, 1.0f);
  ASSERT_TRUE(w.add_tensor("a", DType::kF32, {1000}, as_bytes_of(a)).ok());
  ASSERT_TRUE(w.add_tensor("b", DType::kF32, {10}, as_bytes_of(a).first(40)).ok());
  ASSERT_TRUE(w.write_file(dir.file("m.gguf")).ok());
  EXPECT_EQ(read_bytes(dir.file("m.gguf")), w.serialize());
  auto file = open_gguf(dir.file("m.gguf"));
  ASSERT_TRUE(file.ok()) << file.message();
  EXPECT_EQ(file->find("general.alignment"), nullptr);  // default alignment is not written
  EXPECT_EQ(file->find_tensor("b")->view.ne[0], 10);
}

TEST(GgufWriter, RewriteRealFileRoundTrips) {
  auto src = open_gguf(testing::tinystories656k_dir() + "/TinyStories-656K-Q8_0.gguf");
  ASSERT_TRUE(src.ok()) << src.message();
  GgufWriter w;
  w.set_all(*src);
  for (const TensorInfo& t : src->tensors())
    ASSERT_TRUE(w.add_tensor(t.name, t.view.dtype, std::span<const int64_t>(t.view.ne, t.view.n_dims),
                             std::span<const std::byte>(t.view.data, t.view.n_bytes)).ok());
  const std::vector<std::byte> image = w.serialize();
  auto back = parse_gguf(image, "rewrite");
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(back->metadata().size(), src->metadata().size());
  EXPECT_EQ(*back->get_string_array("tokenizer.ggml.tokens"), *src->get_string_array("tokenizer.ggml.tokens"));
  for (const TensorInfo& t : src->tensors()) {
    const TensorInfo* u = back->find_tensor(t.name);
    ASSERT_NE(u, nullptr) << t.name;
    ASSERT_EQ(u->view.n_bytes, t.view.n_bytes);
    EXPECT_EQ(std::memcmp(u->view.data, t.view.data, t.view.n_bytes), 0) << t.name;
  }
}

// --- targeted error cases (the fuzz tests cover the rest) ---

std::vector<std::byte> small_image(uint32_t alignment = 32) {
  GgufWriter w(alignment);
  w.set("general.architecture", MetaValue::of_string("llama"));
  static const std::vector<float> kData(64, 2.0f);
  LUMEN_CHECK(w.add_tensor("blk.0.attn_q.weight", DType::kF32, {8, 8}, as_bytes_of(kData)).ok());
  return w.serialize();
}

void put_u32(std::vector<std::byte>& b, size_t at, uint32_t v) { std::memcpy(b.data() + at, &v, 4); }
void put_u64(std::vector<std::byte>& b, size_t at, uint64_t v) { std::memcpy(b.data() + at, &v, 8); }

TEST(GgufReader, RejectsBadHeaders) {
  std::vector<std::byte> img = small_image();
  ASSERT_TRUE(parse_gguf(img, "ok").ok());
  {
    auto v = img;
    put_u32(v, 4, 1);
    auto r = parse_gguf(v, "v1");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.message().find("version 1"), std::string::npos) << r.message();
  }
  {
    auto v = img;
    put_u32(v, 4, 2);  // v2 has the same layout as v3
    EXPECT_TRUE(parse_gguf(v, "v2").ok());
    put_u32(v, 4, 4);
    EXPECT_FALSE(parse_gguf(v, "v4").ok());
  }
  {
    auto v = img;
    v[0] = std::byte{'X'};
    auto r = parse_gguf(v, "magic");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.message().find("magic"), std::string::npos);
  }
  {
    auto v = img;
    put_u64(v, 8, uint64_t{1} << 60);  // tensor count
    auto r = parse_gguf(v, "count");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.message().find("tensor count"), std::string::npos) << r.message();
    v = img;
    put_u64(v, 16, uint64_t{1} << 60);  // kv count
    EXPECT_FALSE(parse_gguf(v, "kv").ok());
  }
  EXPECT_FALSE(parse_gguf(std::span<const std::byte>(), "empty").ok());
}

TEST(GgufReader, RejectsHostileStringAndArrayLengths) {
  GgufWriter w;
  w.set("tokenizer.ggml.tokens", MetaValue::of_string_array({"a", "b"}));
  std::vector<std::byte> img = w.serialize();
  // layout: 24 header | u64 keylen | key | u32 type | u32 elem | u64 count | ...
  const size_t key_len = std::strlen("tokenizer.ggml.tokens");
  const size_t count_at = 24 + 8 + key_len + 4 + 4;
  auto v = img;
  put_u64(v, count_at, uint64_t{1} << 60);
  auto r = parse_gguf(v, "count");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("array count"), std::string::npos) << r.message();
  v = img;
  put_u64(v, count_at + 8, 0xFFFFFFFFFFFFFFFFull);  // first string's length
  r = parse_gguf(v, "len");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("string length"), std::string::npos) << r.message();
  v = img;
  put_u64(v, 24, 0xFFFFFFFFull);  // key length
  EXPECT_FALSE(parse_gguf(v, "keylen").ok());
  v = img;
  put_u32(v, 24 + 8 + key_len + 4, 99);  // element type
  r = parse_gguf(v, "elem");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("element type 99"), std::string::npos) << r.message();
}

// Every i-quant type (the DType rows named iq*): a tensor's size comes from its block size and
// bytes, so a file cut inside a super-block and a row that is not a whole number of blocks
// are clear errors naming the tensor, and an intact tensor is exactly its rows' bytes.
TEST(GgufReader, IquantTensorsTruncatedOrMisshapenAreErrors) {
  const std::string name = "blk.0.ffn_down.weight";
  int n_types = 0;
  for (uint32_t id = 0; id < kDTypeIdLimit; ++id) {
    const DTypeInfo* info = find_dtype_info(id);
    if (info == nullptr || !info->name.starts_with("iq")) continue;
    ++n_types;
    SCOPED_TRACE(std::string(info->name));
    const int64_t ne0 = 2 * info->block_size, ne1 = 3;
    const std::vector<std::byte> data(row_bytes(info->dtype, ne0) * ne1, std::byte{0x5a});
    GgufWriter w(32);
    w.set("general.architecture", MetaValue::of_string("llama"));
    ASSERT_TRUE(w.add_tensor_copy(name, info->dtype, {ne0, ne1}, data).ok());
    const std::vector<std::byte> img = w.serialize();
    auto r = parse_gguf(img, "iq");
    ASSERT_TRUE(r.ok()) << r.message();
    const TensorInfo* t = r->find_tensor(name);
    ASSERT_NE(t, nullptr);
    ASSERT_EQ(t->view.n_bytes, data.size());
    const size_t end = static_cast<size_t>(static_cast<const std::byte*>(t->view.data) - img.data()) + data.size();
    // Cut inside the last super-block.
    std::vector<std::byte> cut(img.begin(), img.begin() + static_cast<std::ptrdiff_t>(end - info->block_bytes / 2));
    auto rc = parse_gguf(cut, "cut");
    ASSERT_FALSE(rc.ok());
    EXPECT_NE(rc.message().find("extends past end of file"), std::string::npos) << rc.message();
    EXPECT_NE(rc.message().find(name), std::string::npos) << rc.message();
    // ne[0] half a block: find ne[0] after the name and the dimension count.
    const auto at = std::search(img.begin(), img.end(), reinterpret_cast<const std::byte*>(name.data()),
                                 reinterpret_cast<const std::byte*>(name.data()) + name.size());
    ASSERT_NE(at, img.end());
    const size_t ne0_at = static_cast<size_t>(at - img.begin()) + name.size() + 4;
    std::vector<std::byte> half = img;
    put_u64(half, ne0_at, static_cast<uint64_t>(info->block_size / 2));
    auto rh = parse_gguf(half, "half");
    ASSERT_FALSE(rh.ok());
    EXPECT_NE(rh.message().find("block size"), std::string::npos) << rh.message();
    EXPECT_NE(rh.message().find(name), std::string::npos) << rh.message();
  }
  EXPECT_EQ(n_types, 9);
}

TEST(GgufReader, RejectsBadTensorInfos) {
  const std::vector<std::byte> img = small_image();
  // tensor info starts after the one kv: 24 | 8+20 key | 4 type | 8+5 "llama"
  const size_t info_at = 24 + 8 + std::strlen("general.architecture") + 4 + 8 + 5;
  const size_t name_len = std::strlen("blk.0.attn_q.weight");
  const size_t ndims_at = info_at + 8 + name_len;
  const size_t ne0_at = ndims_at + 4;
  const size_t type_at = ne0_at + 16;
  const size_t offset_at = type_at + 4;
  auto expect_error = [&](std::vector<std::byte> v, const std::string& needle) {
    auto r = parse_gguf(v, "t");
    ASSERT_FALSE(r.ok()) << needle;
    EXPECT_NE(r.message().find(needle), std::string::npos) << r.message();
    EXPECT_NE(r.message().find("blk.0.attn_q.weight"), std::string::npos) << r.message();
  };
  auto v = img;
  put_u32(v, type_at, 99);
  expect_error(v, "unknown ggml type id 99");
  v = img;
  put_u32(v, ndims_at, 5);
  expect_error(v, "n_dims 5");
  v = img;
  put_u64(v, ne0_at, 1ull << 40);
  expect_error(v, "extends past end of file");
  v = img;
  put_u64(v, ne0_at, 1ull << 62);
  put_u64(v, ne0_at + 8, 1ull << 62);
  expect_error(v, "overflows");
  v = img;
  put_u64(v, ne0_at, 0xFFFFFFFFFFFFFFFFull);
  expect_error(v, "too large");
  v = img;
  put_u64(v, offset_at, 4);
  expect_error(v, "alignment");
  v = img;
  put_u64(v, offset_at, 0xFFFFFFFFFFFFFFE0ull);
  expect_error(v, "extends past end of file");
  v = img;
  put_u32(v, type_at, static_cast<uint32_t>(DType::kQ8_0));  // ne[0] = 8 not a multiple of 32
  expect_error(v, "block size");
  // A zero dim is an empty tensor, harmless.
  v = img;
  put_u64(v, ne0_at + 8, 0);
  auto r = parse_gguf(v, "zero");
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->find_tensor("blk.0.attn_q.weight")->view.n_bytes, 0u);
}

TEST(GgufReader, RejectsDuplicatesAndBadAlignment) {
  {
    GgufWriter w;
    std::vector<float> a(4, 0.f);
    ASSERT_TRUE(w.add_tensor("x", DType::kF32, {4}, as_bytes_of(a)).ok());
    ASSERT_TRUE(w.add_tensor("y", DType::kF32, {4}, as_bytes_of(a)).ok());
    auto img = w.serialize();
    // Rename "y" to "x": find the second name in the info table.
    for (size_t i = img.size() - 1; i > 0; --i) {
      if (img[i] == std::byte{'y'} && img[i - 1] == std::byte{0}) { img[i] = std::byte{'x'}; break; }
    }
    auto r = parse_gguf(img, "dup");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.message().find("duplicate tensor 'x'"), std::string::npos) << r.message();
  }
  {
    GgufWriter w;
    w.set("a.b", MetaValue::of_u32(1));
    w.set("a.c", MetaValue::of_u32(2));
    auto img = w.serialize();
    img[24 + 8 + 2] = std::byte{'b'};  // second key -> "a.b"... first key is at 24+8
    img[24 + 8 + 3 + 4 + 4 + 8 + 2] = std::byte{'b'};
    auto r = parse_gguf(img, "dupkey");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.message().find("duplicate metadata key 'a.b'"), std::string::npos) << r.message();
  }
  for (int64_t bad : std::vector<int64_t>{0, 3, -32, int64_t{1} << 40}) {
    GgufWriter w;
    w.set("general.alignment", MetaValue::of_int(ValueType::kI64, bad));
    auto img = w.serialize();
    // The writer always writes its own alignment (u32 32) for that key: patch the value.
    auto r0 = parse_gguf(img, "align-ok");
    ASSERT_TRUE(r0.ok()) << r0.message();
    const size_t value_at = 24 + 8 + std::strlen("general.alignment") + 4;
    put_u32(img, value_at, static_cast<uint32_t>(bad));
    auto r = parse_gguf(img, "align");
    if (bad == (int64_t{1} << 40)) continue;  // truncated to 0 as u32: covered by the 0 case
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.message().find("general.alignment"), std::string::npos) << r.message();
  }
}

TEST(GgufReader, TruncatedDataNamesTheTensor) {
  std::vector<std::byte> img = small_image();
  img.resize(img.size() - 1);
  auto r = parse_gguf(img, "trunc");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("tensor 'blk.0.attn_q.weight': data"), std::string::npos) << r.message();
  EXPECT_NE(r.message().find("extends past end of file"), std::string::npos) << r.message();
}

TEST(GgufReader, VocabOnlyFileWithoutPadding) {
  GgufWriter w;
  w.set("tokenizer.ggml.model", MetaValue::of_string("llama"));
  auto img = w.serialize();
  // No tensors: a file that ends right after the metadata (no padding) is fine.
  img.resize(24 + 8 + std::strlen("tokenizer.ggml.model") + 4 + 8 + 5);
  auto r = parse_gguf(img, "vocab");
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_TRUE(r->tensors().empty());
}

}  // namespace
}  // namespace lumen::gguf
