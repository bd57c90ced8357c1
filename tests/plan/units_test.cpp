#include "plan/units.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace ridge::plan {
namespace {

TEST(Units, ParsesGpuCountsAndSizes) {
  GpuSpec g = parse_gpus("2x80GB");
  EXPECT_EQ(g.count, 2);
  EXPECT_EQ(g.bytes_each, 80e9);
  EXPECT_EQ(g.total_bytes(), 160e9);
  g = parse_gpus(" 8 x 24GiB ");
  EXPECT_EQ(g.count, 8);
  EXPECT_EQ(g.bytes_each, 24.0 * 1024 * 1024 * 1024);
  g = parse_gpus("141GB");
  EXPECT_EQ(g.count, 1);
  EXPECT_EQ(g.bytes_each, 141e9);
  EXPECT_EQ(parse_gpus("4X1.5tb").total_bytes(), 6e12);
}

TEST(Units, RejectsBadGpuSpecs) {
  for (const char* bad : {"0x80GB", "-1x80GB", "x80GB", "2x", "2x80", "2x0GB", "2x80XB", "twox80GB", "2x-80GB", ""})
    EXPECT_THROW(parse_gpus(bad), Error) << bad;
  try {
    parse_gpus("0x80GB");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at least 1"), std::string::npos) << e.what();
  }
}

TEST(Units, DecimalAndBinaryUnitsDiffer) {
  EXPECT_EQ(parse_bytes("1GB"), 1e9);
  EXPECT_EQ(parse_bytes("1GiB"), 1073741824.0);
  EXPECT_EQ(parse_bytes("512 MiB"), 512.0 * 1024 * 1024);
  EXPECT_EQ(parse_bytes("4096B"), 4096.0);
  EXPECT_EQ(format_si(141.107e9), "141.11 GB");
  EXPECT_EQ(format_iec(2.0 * 1024 * 1024 * 1024), "2.00 GiB");
  EXPECT_EQ(format_iec(327680), "320.00 KiB");
  EXPECT_EQ(format_both(80e9), "80.00 GB (74.51 GiB)");
  // A shortfall (free memory below zero) keeps its sign in both units.
  EXPECT_EQ(format_both(-1e9), "-1.00 GB (-953.67 MiB)");
  EXPECT_EQ(format_si(512), "512 B");
}

TEST(Units, Reserve) {
  EXPECT_EQ(parse_reserve("none").of(160e9), 0.0);
  EXPECT_EQ(parse_reserve("0").of(160e9), 0.0);
  EXPECT_DOUBLE_EQ(parse_reserve("10%").of(160e9), 16e9);
  EXPECT_EQ(parse_reserve("4GiB").of(160e9), 4.0 * 1024 * 1024 * 1024);
  EXPECT_EQ(parse_reserve("10%").describe(), "10% of total");
  EXPECT_THROW(parse_reserve("100%"), Error);
  EXPECT_THROW(parse_reserve("-5%"), Error);
  EXPECT_THROW(parse_reserve("lots"), Error);
}

TEST(Units, FormatCount) {
  EXPECT_EQ(format_count(6738415616), "6,738,415,616");
  EXPECT_EQ(format_count(999), "999");
  EXPECT_EQ(format_count(1000), "1,000");
  EXPECT_EQ(format_count(-1234567), "-1,234,567");
}

}  // namespace
}  // namespace ridge::plan
