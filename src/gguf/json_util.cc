#include "gguf/json_util.h"

#include <cmath>
#include <exception>
#include <unordered_map>
#include <vector>

#include "gguf/gguf_util.h"

namespace lumen::gguf {
namespace {

constexpr int kMaxJsonDepth = 64;

}  // namespace

bool json_depth_within(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

namespace {

// Builds an ordered_json from SAX events. Each open object keeps a hash index of its keys,
// so a key costs O(1) instead of a scan of the keys before it. The pointers on the stack stay
// valid: a container only grows while it is the innermost open one.
class OrderedBuilder final : public nlohmann::json_sax<nlohmann::ordered_json> {
 public:
  using J = nlohmann::ordered_json;

  bool null() override { return put(J(nullptr)); }
  bool boolean(bool v) override { return put(J(v)); }
  bool number_integer(number_integer_t v) override { return put(J(v)); }
  bool number_unsigned(number_unsigned_t v) override { return put(J(v)); }
  bool number_float(number_float_t v, const string_t&) override { return put(J(v)); }
  bool string(string_t& v) override { return put(J(std::move(v))); }
  bool binary(binary_t&) override { return false; }  // not in JSON text
  bool start_object(std::size_t) override { return open(J::object()); }
  bool key(string_t& k) override {
    stack_.back().key = std::move(k);
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(J::array()); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception&) override {
    error_byte_ = position;
    return false;
  }

  size_t error_byte() const { return error_byte_; }
  J& root() { return root_; }

 private:
  struct Open {
    J* value;
    std::string key;                                // an object's pending key
    std::unordered_map<std::string, size_t> index;  // an object's keys -> their place
  };

  // Places v in the innermost open container (or as the root); returns where it went.
  J* place(J&& v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Open& top = stack_.back();
    if (top.value->is_array()) {
      top.value->push_back(std::move(v));
      return &top.value->back();
    }
    auto& items = static_cast<J::object_t::Container&>(top.value->get_ref<J::object_t&>());
    const auto [it, fresh] = top.index.try_emplace(top.key, items.size());
    if (!fresh) {
      items[it->second].second = std::move(v);
      return &items[it->second].second;
    }
    items.emplace_back(std::move(top.key), std::move(v));
    return &items.back().second;
  }
  bool put(J&& v) {
    place(std::move(v));
    return true;
  }
  bool open(J&& container) {
    stack_.push_back(Open{place(std::move(container)), {}, {}});
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }

  J root_;
  std::vector<Open> stack_;
  size_t error_byte_ = 0;
};

std::string type_of(const nlohmann::json& v) { return v.type_name(); }

// A short printable rendering of a value for error messages (never throws: invalid UTF-8
// is replaced).
std::string short_dump(const nlohmann::json& v) {
  return quote(v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace

Result<nlohmann::json> parse_json(std::string_view text, std::string_view what) {
  if (!json_depth_within(text, kMaxJsonDepth))
    return error(std::string(what) + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    return error(std::string(what) + ": invalid JSON: " + quote(e.what()));
  } catch (const std::exception& e) {
    return error(std::string(what) + ": cannot parse JSON: " + quote(e.what()));
  }
}

Result<nlohmann::ordered_json> parse_ordered_json(std::string_view text) {
  try {
    OrderedBuilder b;
    if (!nlohmann::ordered_json::sax_parse(text.begin(), text.end(), &b))
      return error("not valid JSON (error at byte " + std::to_string(b.error_byte()) + ")");
    return std::move(b.root());
  } catch (const std::exception& e) {
    return error(std::string("cannot parse JSON: ") + e.what());
  }
}

Result<std::optional<int64_t>> json_int(const nlohmann::json& obj, std::string_view key, std::string_view what) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::optional<int64_t>();
  if (it->is_number_unsigned()) {
    const uint64_t u = it->get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX))
      return error(std::string(what) + ": '" + std::string(key) + "' = " + std::to_string(u) + " is too large");
    return std::optional<int64_t>(static_cast<int64_t>(u));
  }
  if (it->is_number_integer()) return std::optional<int64_t>(it->get<int64_t>());
  if (it->is_number_float()) {  // e.g. 4096.0: accept exact integers only
    const double d = it->get<double>();
    if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9.0e15)
      return std::optional<int64_t>(static_cast<int64_t>(d));
  }
  return error(std::string(what) + ": '" + std::string(key) + "' must be an integer, got " + type_of(*it) + " " +
               short_dump(*it));
}

Result<std::optional<double>> json_number(const nlohmann::json& obj, std::string_view key, std::string_view what) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::optional<double>();
  if (it->is_number()) return std::optional<double>(it->get<double>());
  return error(std::string(what) + ": '" + std::string(key) + "' must be a number, got " + type_of(*it) + " " +
               short_dump(*it));
}

Result<std::optional<bool>> json_bool(const nlohmann::json& obj, std::string_view key, std::string_view what) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::optional<bool>();
  if (it->is_boolean()) return std::optional<bool>(it->get<bool>());
  return error(std::string(what) + ": '" + std::string(key) + "' must be a boolean, got " + type_of(*it));
}

Result<std::optional<std::string>> json_string(const nlohmann::json& obj, std::string_view key,
                                               std::string_view what) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::optional<std::string>();
  if (it->is_string()) return std::optional<std::string>(it->get<std::string>());
  return error(std::string(what) + ": '" + std::string(key) + "' must be a string, got " + type_of(*it));
}

}  // namespace lumen::gguf
