// The ISA names, RIDGE_ISA's parsing and its errors, and what each ISA asks of the CPU.
#include "kernels/isa.h"

#include <gtest/gtest.h>

#include <string>

#include "core/cpu_features.h"
#include "core/error.h"

namespace ridge::kernels {
namespace {

TEST(Isa, NamesRoundTrip) {
  const char* names[] = {"scalar", "avx2", "avx_vnni", "avx512_vnni", "amx_int8"};
  for (int i = 0; i < kIsaCount; ++i) {
    EXPECT_STREQ(isa_name(kAllIsas[i]), names[i]);
    EXPECT_EQ(isa_from_name(names[i]), kAllIsas[i]);
  }
  EXPECT_EQ(isa_from_name("AVX2"), std::nullopt);
  EXPECT_EQ(isa_from_name("avx512"), std::nullopt);
  EXPECT_EQ(isa_from_name(""), std::nullopt);
}

// The levels' requirements, from the features: each ISA needs the features it names and
// those of the ISAs its kernels borrow from.
TEST(Isa, SupportFollowsTheFeatures) {
  const CpuFeatures& f = cpu_features();
  EXPECT_TRUE(cpu_supports(Isa::kScalar));
  EXPECT_EQ(cpu_supports(Isa::kAvx2), f.avx2 && f.fma && f.f16c && f.os_avx);
  EXPECT_EQ(cpu_supports(Isa::kAvxVnni), cpu_supports(Isa::kAvx2) && f.avx_vnni);
  EXPECT_EQ(cpu_supports(Isa::kAvx512Vnni), cpu_supports(Isa::kAvx2) && f.os_avx512 && f.avx512f && f.avx512bw &&
                                                f.avx512vl && f.avx512dq && f.avx512_vnni && f.avx512_bitalg);
  EXPECT_EQ(cpu_supports(Isa::kAmxInt8),
            cpu_supports(Isa::kAvx512Vnni) && f.amx_tile && f.amx_int8 && f.os_amx);
  // The best is the highest supported, and RIDGE_ISA unset or empty means it.
  Isa best = Isa::kScalar;
  for (Isa isa : kAllIsas)
    if (cpu_supports(isa)) best = isa;
  EXPECT_EQ(cpu_best_isa(), best);
  EXPECT_EQ(isa_from_env_value(nullptr), best);
  EXPECT_EQ(isa_from_env_value(""), best);
}

TEST(Isa, RidgeIsaPicksAnySupportedIsa) {
  for (Isa isa : kAllIsas) {
    if (cpu_supports(isa)) {
      EXPECT_EQ(isa_from_env_value(isa_name(isa)), isa);
    }
  }
}

// An unknown name: an error naming the value, the choices and the CPU's best.
TEST(Isa, RidgeIsaUnknownNameIsAClearError) {
  try {
    isa_from_env_value("avx9000");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("RIDGE_ISA=avx9000"), std::string::npos) << m;
    EXPECT_NE(m.find("avx512_vnni"), std::string::npos) << m;
    EXPECT_NE(m.find(isa_name(cpu_best_isa())), std::string::npos) << m;
  }
}

// An ISA the CPU lacks: an error naming it and the CPU's best (never a silent fallback).
TEST(Isa, RidgeIsaTheCpuLacksIsAnErrorNamingBoth) {
  bool lacks_one = false;
  for (Isa isa : kAllIsas) {
    if (cpu_supports(isa)) continue;
    lacks_one = true;
    try {
      isa_from_env_value(isa_name(isa));
      ADD_FAILURE() << "no error for " << isa_name(isa);
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(str_cat("no ", isa_name(isa))), std::string::npos) << m;
      EXPECT_NE(m.find(str_cat("best it supports is ", isa_name(cpu_best_isa()))), std::string::npos) << m;
    }
    EXPECT_THROW(require_isa(isa, "test"), Error);
  }
  if (!lacks_one) GTEST_SKIP() << "skipped: this CPU has every ISA";
}

}  // namespace
}  // namespace ridge::kernels
