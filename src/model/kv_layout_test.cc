#include "model/kv_layout.h"

#include <vector>

#include <gtest/gtest.h>

namespace lumen::model {
namespace {

TEST(KvLayout, AllFullLayersFormOneGroup) {
  const std::vector<LayerAttn> attn(4);
  auto l = build_kv_layout(attn, 2, 8);
  ASSERT_TRUE(l.ok()) << l.message();
  ASSERT_EQ(l->n_groups(), 1);
  EXPECT_EQ(l->groups[0].window, 0);
  EXPECT_EQ(l->groups[0].layers, (std::vector<int32_t>{0, 1, 2, 3}));
  for (int32_t il = 0; il < 4; ++il) {
    EXPECT_EQ(l->layers[il].group, 0);
    EXPECT_EQ(l->layers[il].slot, il);
    EXPECT_EQ(l->layers[il].source_layer, -1);
  }
  EXPECT_EQ(l->group_bytes_per_token(0, 2), size_t{2 * 4 * 2 * 8 * 2});
  EXPECT_EQ(check_kv_layout(*l), "");
}

TEST(KvLayout, GroupsByWindowFullFirstAndCrossLayerReadersStoreNothing) {
  // Gemma-3-like: layers 0-2 local (w 4), 3 global, 4 local (w 4), 5 w 8, 6 reads 3,
  // 7 reads 4 with a narrower window, 8 has no attention.
  std::vector<LayerAttn> attn(9);
  for (int il : {0, 1, 2, 4}) attn[il].window = 4;
  attn[5].window = 8;
  attn[6].kv_source_layer = 3;
  attn[7].window = 2;
  attn[7].kv_source_layer = 4;
  attn[8].has_attention = false;
  auto l = build_kv_layout(attn, 1, 4);
  ASSERT_TRUE(l.ok()) << l.message();
  ASSERT_EQ(l->n_groups(), 3);
  EXPECT_EQ(l->groups[0].window, 0);
  EXPECT_EQ(l->groups[0].layers, (std::vector<int32_t>{3}));
  EXPECT_EQ(l->groups[1].window, 4);
  EXPECT_EQ(l->groups[1].layers, (std::vector<int32_t>{0, 1, 2, 4}));
  EXPECT_EQ(l->groups[2].window, 8);
  EXPECT_EQ(l->groups[2].layers, (std::vector<int32_t>{5}));
  EXPECT_EQ(l->layers[4].group, 1);
  EXPECT_EQ(l->layers[4].slot, 3);
  // CLA readers point at their source's place.
  EXPECT_EQ(l->layers[6].group, 0);
  EXPECT_EQ(l->layers[6].slot, 0);
  EXPECT_EQ(l->layers[6].source_layer, 3);
  EXPECT_EQ(l->layers[7].group, 1);
  EXPECT_EQ(l->layers[7].slot, 3);
  EXPECT_EQ(l->layers[7].source_layer, 4);
  EXPECT_EQ(l->layers[8].group, -1);
  EXPECT_EQ(check_kv_layout(*l), "");
  // Only storing layers cost bytes: group 1 holds 4 of the 9 layers.
  EXPECT_EQ(l->group_bytes_per_token(1, 4), size_t{2 * 4 * 1 * 4 * 4});
}

TEST(KvLayout, RejectsBadSources) {
  std::vector<LayerAttn> attn(3);
  attn[1].kv_source_layer = 1;  // itself
  EXPECT_FALSE(build_kv_layout(attn, 1, 4).ok());
  attn[1].kv_source_layer = 2;  // a later layer
  EXPECT_FALSE(build_kv_layout(attn, 1, 4).ok());
  attn[1].kv_source_layer = 0;
  attn[2].kv_source_layer = 1;  // a reader of a reader
  auto r = build_kv_layout(attn, 1, 4);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("layer 2"), std::string::npos) << r.message();
  attn[2].kv_source_layer = -1;
  attn[0].window = 4;  // a full-attention reader of a sliding layer
  EXPECT_FALSE(build_kv_layout(attn, 1, 4).ok());
  attn[1].window = 8;  // wider than its source
  EXPECT_FALSE(build_kv_layout(attn, 1, 4).ok());
  attn[1].window = 4;
  EXPECT_TRUE(build_kv_layout(attn, 1, 4).ok());
  attn[2].window = -1;
  EXPECT_FALSE(build_kv_layout(attn, 1, 4).ok());
  attn[2].window = 0;
  attn[2].has_attention = false;
  attn[1].kv_source_layer = 2;  // source without attention (and later)
  EXPECT_FALSE(build_kv_layout(attn, 1, 4).ok());
}

TEST(KvLayout, CheckFindsInconsistencies) {
  std::vector<LayerAttn> attn(3);
  attn[2].window = 4;
  auto l = build_kv_layout(attn, 1, 4);
  ASSERT_TRUE(l.ok());
  KvLayout bad = *l;
  bad.layers[1].slot = 0;
  EXPECT_NE(check_kv_layout(bad), "");
  bad = *l;
  bad.groups[0].layers = {1, 0};
  EXPECT_NE(check_kv_layout(bad), "");
  bad = *l;
  std::swap(bad.groups[0], bad.groups[1]);
  EXPECT_NE(check_kv_layout(bad), "");
}

}  // namespace
}  // namespace lumen::model
