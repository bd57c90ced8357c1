// cpu_features() against an independent source: the flags Linux prints in /proc/cpuinfo
// (its own CPUID reading, with features the OS cannot save cleared).
#include "core/cpu_features.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace ridge {
namespace {

std::set<std::string> proc_cpuinfo_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> flags;
    for (std::string w; words >> w;) flags.insert(w);
    return flags;
  }
  return {};
}

TEST(CpuFeatures, AgreeWithProcCpuinfo) {
  const std::set<std::string> flags = proc_cpuinfo_flags();
  if (flags.empty()) GTEST_SKIP() << "skipped: no /proc/cpuinfo flags (not Linux on x86)";
  const CpuFeatures& f = cpu_features();
  auto has = [&](const char* name) { return flags.count(name) > 0; };
  // Linux clears the AVX flags when XSAVE does not cover their registers, so those
  // compare with the CPUID bit and the OS bit together.
  EXPECT_EQ(f.fma && f.os_avx, has("fma"));
  EXPECT_EQ(f.f16c && f.os_avx, has("f16c"));
  EXPECT_EQ(f.avx2 && f.os_avx, has("avx2"));
  EXPECT_EQ(f.avx_vnni && f.os_avx, has("avx_vnni"));
  EXPECT_EQ(f.avx512f && f.os_avx512, has("avx512f"));
  EXPECT_EQ(f.avx512bw && f.os_avx512, has("avx512bw"));
  EXPECT_EQ(f.avx512vl && f.os_avx512, has("avx512vl"));
  EXPECT_EQ(f.avx512dq && f.os_avx512, has("avx512dq"));
  EXPECT_EQ(f.avx512_vnni && f.os_avx512, has("avx512_vnni"));
  EXPECT_EQ(f.avx512_bitalg && f.os_avx512, has("avx512_bitalg"));
  EXPECT_EQ(f.amx_tile && f.os_amx, has("amx_tile"));
  EXPECT_EQ(f.amx_int8 && f.os_amx, has("amx_int8"));
  EXPECT_EQ(f.amx_bf16 && f.os_amx, has("amx_bf16"));
}

TEST(CpuFeatures, ReadOnce) { EXPECT_EQ(&cpu_features(), &cpu_features()); }

}  // namespace
}  // namespace ridge
