// The dtype trait table: GGUF numbering, block sizes, names, and which conversions exist.
#include "core/dtype.h"

#include <gtest/gtest.h>

#include "core/quant_blocks.h"

namespace ridge {
namespace {

TEST(DType, BlockLayoutsMatchTheStructs) {
  struct Expected {
    DType type;
    int64_t block_size;
    size_t type_size;
  };
  const Expected expected[] = {
      {DType::F32, 1, 4},
      {DType::F16, 1, 2},
      {DType::BF16, 1, 2},
      {DType::Q4_0, kQK4_0, sizeof(BlockQ4_0)},
      {DType::Q4_1, kQK4_1, sizeof(BlockQ4_1)},
      {DType::Q5_0, kQK5_0, sizeof(BlockQ5_0)},
      {DType::Q5_1, kQK5_1, sizeof(BlockQ5_1)},
      {DType::Q8_0, kQK8_0, sizeof(BlockQ8_0)},
      {DType::Q8_1, kQK8_1, sizeof(BlockQ8_1)},
      {DType::Q2_K, kQK_K, sizeof(BlockQ2_K)},
      {DType::Q3_K, kQK_K, sizeof(BlockQ3_K)},
      {DType::Q4_K, kQK_K, sizeof(BlockQ4_K)},
      {DType::Q5_K, kQK_K, sizeof(BlockQ5_K)},
      {DType::Q6_K, kQK_K, sizeof(BlockQ6_K)},
      {DType::Q8_K, kQK_K, sizeof(BlockQ8_K)},
  };
  for (const Expected& e : expected) {
    const TypeTraits& t = type_traits(e.type);
    EXPECT_EQ(t.block_size, e.block_size) << t.name;
    EXPECT_EQ(t.type_size, e.type_size) << t.name;
    EXPECT_NE(t.to_float, nullptr) << t.name << " should dequantize";
    EXPECT_NE(t.from_float, nullptr) << t.name << " should quantize";
  }
  // Types ridge dequantizes, most without a quantizer of ours.
  const Expected read_only[] = {
      {DType::IQ4_NL, kQK4_NL, sizeof(BlockIQ4_NL)},   {DType::IQ4_XS, kQK_K, sizeof(BlockIQ4_XS)},
      {DType::IQ2_XXS, kQK_K, sizeof(BlockIQ2_XXS)},   {DType::IQ2_XS, kQK_K, sizeof(BlockIQ2_XS)},
      {DType::IQ2_S, kQK_K, sizeof(BlockIQ2_S)},       {DType::IQ3_XXS, kQK_K, sizeof(BlockIQ3_XXS)},
      {DType::IQ3_S, kQK_K, sizeof(BlockIQ3_S)},       {DType::IQ1_S, kQK_K, sizeof(BlockIQ1_S)},
      {DType::IQ1_M, kQK_K, sizeof(BlockIQ1_M)},       {DType::NVFP4, kQKNvfp4, sizeof(BlockNVFP4)},
      {DType::MXFP4, kQKMxfp4, sizeof(BlockMXFP4)},    {DType::TQ1_0, kQK_K, sizeof(BlockTQ1_0)},
      {DType::TQ2_0, kQK_K, sizeof(BlockTQ2_0)},
  };
  for (const Expected& e : read_only) {
    const TypeTraits& t = type_traits(e.type);
    EXPECT_EQ(t.block_size, e.block_size) << t.name;
    EXPECT_EQ(t.type_size, e.type_size) << t.name;
    EXPECT_NE(t.to_float, nullptr) << t.name << " should dequantize";
  }
}

TEST(DType, GgufNumbering) {
  // Ids are read straight from GGUF tensor infos, so they must be ggml's.
  EXPECT_EQ(static_cast<uint32_t>(DType::Q8_0), 8u);
  EXPECT_EQ(static_cast<uint32_t>(DType::Q4_K), 12u);
  EXPECT_EQ(static_cast<uint32_t>(DType::BF16), 30u);
  EXPECT_FALSE(is_known_dtype(4));  // the removed Q4_2
  EXPECT_FALSE(is_known_dtype(5));
  EXPECT_FALSE(is_known_dtype(kDTypeCount));
  EXPECT_TRUE(is_known_dtype(30));
  EXPECT_EQ(type_traits(static_cast<DType>(999)).block_size, 0);
  // The runtime-only formats have traits but are never valid in a file.
  EXPECT_EQ(type_traits(DType::NF4).block_size, 64);
  EXPECT_EQ(row_size(DType::NF4, 128), 8u + 2u * 33u);
  EXPECT_EQ(row_size(DType::I8_ROWS, 64), 4u + 64u);
  EXPECT_FALSE(is_known_dtype(static_cast<uint32_t>(DType::NF4)));
  // Q4_K repacked at load (kernels/gemm/repack.h): Q4_K's sizes, no row-wise conversion.
  EXPECT_EQ(row_size(DType::Q4_K_R16, 512), row_size(DType::Q4_K, 512));
  EXPECT_EQ(type_traits(DType::Q4_K_R16).to_float, nullptr);
  EXPECT_FALSE(is_known_dtype(static_cast<uint32_t>(DType::Q4_K_R16)));
  EXPECT_EQ(type_traits(static_cast<DType>(1003)).block_size, 0);
}

TEST(DType, NamesRoundTripCaseInsensitively) {
  EXPECT_EQ(dtype_name(DType::Q4_K), "q4_K");
  EXPECT_EQ(dtype_name(DType::F16), "f16");
  EXPECT_EQ(dtype_name(static_cast<DType>(4)), "unknown");
  EXPECT_EQ(dtype_from_name("Q4_K"), DType::Q4_K);
  EXPECT_EQ(dtype_from_name("q4_k"), DType::Q4_K);
  EXPECT_EQ(dtype_from_name("BF16"), DType::BF16);
  EXPECT_EQ(dtype_from_name("iq2_xxs"), DType::IQ2_XXS);
  EXPECT_EQ(dtype_from_name("q4"), std::nullopt);
  EXPECT_EQ(dtype_from_name(""), std::nullopt);
  EXPECT_EQ(dtype_from_name("q4_K "), std::nullopt);
  for (uint32_t id = 0; id < kDTypeCount; ++id) {
    if (!is_known_dtype(id)) continue;
    const auto type = static_cast<DType>(id);
    EXPECT_EQ(dtype_from_name(dtype_name(type)), type) << dtype_name(type);
  }
}

TEST(DType, RowSize) {
  EXPECT_EQ(row_size(DType::Q4_K, 4096), 16u * 144u);
  EXPECT_EQ(row_size(DType::Q8_0, 32), 34u);
  EXPECT_EQ(row_size(DType::F16, 3), 6u);
  EXPECT_EQ(row_size(DType::F32, 0), 0u);
}

TEST(DType, UnimplementedFormatsHaveNoConversions) {
  // A null entry is how callers learn a format is not supported (yet).
  EXPECT_EQ(type_traits(DType::Q1_0).to_float, nullptr);
  EXPECT_EQ(type_traits(DType::IQ4_XS).from_float, nullptr);
  EXPECT_EQ(type_traits(DType::I32).to_float, nullptr);
}

}  // namespace
}  // namespace ridge
