// Real chat templates (Qwen3, Gemma 2 / 3, Phi-3 / 3.5, Mistral Nemo, Qwen2.5, Llama 3.2,
// DeepSeek-R1-Distill, and the tool-use templates of Hermes 3, Command-R7B / R+,
// functionary v3.1 / v3.2 and firefunction v2: macros, filter blocks, indent, Markup)
// rendered by lumen byte-identical to Hugging Face's apply_chat_template as jinja2 renders it
// (tests/data/chat_templates: the templates, the conversations, expected.json and the
// script that made it with Debian's python3-jinja2, SOURCES.md for where each template
// comes from). A conversation the template rejects (raise_exception) must be rejected by
// lumen with the same message.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/chat_template.h"

#ifndef LUMEN_TEST_DATA_DIR
#error "LUMEN_TEST_DATA_DIR must name tests/data"
#endif

namespace lumen {
namespace {

using nlohmann::ordered_json;

const std::string kDir = std::string(LUMEN_TEST_DATA_DIR) + "/chat_templates/";

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The variables HF passes (render_jinja2.py's context()), in the same order.
ordered_json context_of(const ordered_json& templ, const ordered_json& conv) {
  ordered_json ctx;
  ctx["messages"] = conv["messages"];
  if (conv.contains("tools")) ctx["tools"] = conv["tools"];
  ctx["add_generation_prompt"] = conv["add_generation_prompt"];
  ctx["bos_token"] = templ["bos_token"];
  ctx["eos_token"] = templ["eos_token"];
  if (templ.contains("extra"))
    for (const auto& [k, v] : templ["extra"].items()) ctx[k] = v;
  if (conv.contains("extra"))
    for (const auto& [k, v] : conv["extra"].items()) ctx[k] = v;
  return ctx;
}

TEST(ChatTemplateJinja, RealTemplatesRenderAsJinja2Does) {
  const ordered_json spec = ordered_json::parse(read_text(kDir + "conversations.json"));
  const ordered_json expected = ordered_json::parse(read_text(kDir + "expected.json"));
  int n_checked = 0;
  for (const auto& [tname, templ] : spec["templates"].items()) {
    auto t = tok::ChatTemplate::parse(read_text(kDir + templ["file"].get<std::string>()));
    ASSERT_TRUE(t.ok()) << tname << ": " << t.message();
    for (const ordered_json& conv : spec["conversations"]) {
      if (conv.contains("only")) {
        bool listed = false;
        for (const auto& n : conv["only"]) listed |= n == tname;
        if (!listed) continue;
      }
      const std::string key = tname + "/" + conv["name"].get<std::string>();
      ASSERT_TRUE(expected.contains(key)) << key << " is missing from expected.json (rerun render_jinja2.py)";
      const ordered_json& want = expected[key];
      Result<std::string> got = t->render_json(context_of(templ, conv).dump());
      ++n_checked;
      if (want.contains("error")) {
        ASSERT_FALSE(got.ok()) << key << ": jinja2 raised '" << want["error"].get<std::string>() << "', lumen rendered "
                               << *got;
        EXPECT_NE(got.message().find(want["error"].get<std::string>()), std::string::npos) << key << ": " << got.message();
        continue;
      }
      ASSERT_TRUE(got.ok()) << key << ": " << got.message();
      EXPECT_EQ(*got, want["output"].get<std::string>()) << key;
    }
  }
  EXPECT_EQ(n_checked, static_cast<int>(expected.size()));
  std::printf("[ chat ] %d renderings byte-identical to jinja2\n", n_checked);
}

// expected.json is what jinja2 renders today: the script that wrote it, rerun with --check.
TEST(ChatTemplateJinja, ExpectationsAreJinja2Output) {
  if (std::system("/usr/bin/python3 -c 'import jinja2' > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "/usr/bin/python3 with jinja2 is not installed (scripts/setup.sh installs python3-jinja2)";
  const std::string cmd = "/usr/bin/python3 " + kDir + "render_jinja2.py --check";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

}  // namespace
}  // namespace lumen
