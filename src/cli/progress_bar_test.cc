#include "cli/progress_bar.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace lumen::cli {
namespace {

// Runs a job of 100 units through a bar writing to a temp file; returns what it wrote.
std::string render(bool interactive) {
  std::FILE* f = std::tmpfile();
  {
    ProgressBar bar(f, interactive);
    bar.start("quantize", 100, "weights");
    for (uint64_t done : {5, 15, 16, 35, 99, 100}) bar.update(done, "blk.0.ffn_down.weight");
    bar.finish();
    bar.update(100, "after finish");  // ignored
  }
  std::string out;
  std::rewind(f);
  for (int c; (c = std::fgetc(f)) != EOF;) out += static_cast<char>(c);
  std::fclose(f);
  return out;
}

TEST(ProgressBar, PlainLinesWhenNotATerminal) {
  const std::string out = render(false);
  EXPECT_EQ(out.find('\r'), std::string::npos) << out;
  EXPECT_NE(out.find("quantize: 0% of 100 weights\n"), std::string::npos) << out;
  EXPECT_NE(out.find("quantize: 10% (blk.0.ffn_down.weight, "), std::string::npos) << out;
  EXPECT_NE(out.find("quantize: 30% ("), std::string::npos) << out;
  EXPECT_NE(out.find("quantize: 90% ("), std::string::npos) << out;
  EXPECT_EQ(out.find("quantize: 20%"), std::string::npos) << out;  // 15 -> 35 skips it
  EXPECT_EQ(out.find("100% ("), std::string::npos) << out;         // the end is the "done" line
  EXPECT_NE(out.find("quantize: done after "), std::string::npos) << out;
  EXPECT_EQ(out.find("after finish"), std::string::npos) << out;
}

TEST(ProgressBar, RedrawnBarOnATerminal) {
  const std::string out = render(true);
  EXPECT_NE(out.find("\rquantize ["), std::string::npos) << out;
  // The first update draws (the later ones within 100 ms are skipped); finish draws 100%.
  EXPECT_NE(out.find("[#.............................]   5%"), std::string::npos) << out;
  EXPECT_NE(out.find("[##############################] 100%"), std::string::npos) << out;
  EXPECT_EQ(out.back(), '\n');
}

}  // namespace
}  // namespace lumen::cli
