#include "core/cpu_features.h"

#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace ridge {

namespace {

#if defined(__x86_64__) || defined(__i386__)

bool bit(uint32_t word, int n) { return (word >> n) & 1u; }

// XCR0 through xgetbv (in asm: the intrinsic needs -mxsave on the whole file).
uint64_t read_xcr0() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

CpuFeatures probe() {
  CpuFeatures f;
  uint32_t eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  f.fma = bit(ecx, 12);
  f.f16c = bit(ecx, 29);
  const bool osxsave = bit(ecx, 27), avx = bit(ecx, 28);
  if (osxsave && avx) {
    const uint64_t xcr0 = read_xcr0();
    f.os_avx = (xcr0 & 0x6) == 0x6;
    f.os_avx512 = f.os_avx && (xcr0 & 0xe0) == 0xe0;
    f.os_amx = (xcr0 & 0x60000) == 0x60000;
  }
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  const uint32_t max_subleaf = eax;
  f.avx2 = bit(ebx, 5);
  f.avx512f = bit(ebx, 16);
  f.avx512dq = bit(ebx, 17);
  f.avx512bw = bit(ebx, 30);
  f.avx512vl = bit(ebx, 31);
  f.avx512_vnni = bit(ecx, 11);
  f.avx512_bitalg = bit(ecx, 12);
  f.amx_bf16 = bit(edx, 22);
  f.amx_tile = bit(edx, 24);
  f.amx_int8 = bit(edx, 25);
  if (max_subleaf >= 1) {
    __cpuid_count(7, 1, eax, ebx, ecx, edx);
    f.avx_vnni = bit(eax, 4);
  }
  return f;
}

#else

CpuFeatures probe() { return {}; }

#endif

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = probe();
  return features;
}

}  // namespace ridge
