// What the CPU ridge runs on can execute: one probe (cpuid and xgetbv, read once), used
// by the kernels' ISA choice (kernels/isa.h) and by plan's probes alike.
//
//   const CpuFeatures& f = cpu_features();
//   if (f.avx512_vnni && f.os_avx512) { ... }
//
// A CPUID bit says the core has an instruction set; the matching os_* bit says the
// operating system saves its registers on a context switch (XCR0), without which the
// instructions fault. Both are needed. AMX has one step more on Linux: a process must ask
// for the tile data state (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)) before
// its first tile instruction; os_amx only says the OS supports the state.
#pragma once

namespace ridge {

struct CpuFeatures {
  // CPUID leaf 1 and leaf 7.
  bool fma = false;
  bool f16c = false;
  bool avx2 = false;
  bool avx_vnni = false;       // VEX-encoded vpdpbusd on ymm (Alder Lake, Sapphire Rapids, Zen 5)
  bool avx512f = false;
  bool avx512dq = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512_vnni = false;
  bool avx512_bitalg = false;
  bool amx_tile = false;
  bool amx_int8 = false;
  bool amx_bf16 = false;
  // XCR0: register state the OS enabled.
  bool os_avx = false;     // XMM and YMM (bits 1, 2)
  bool os_avx512 = false;  // opmask, ZMM_Hi256, Hi16_ZMM (bits 5, 6, 7)
  bool os_amx = false;     // XTILECFG, XTILEDATA (bits 17, 18)
};

// Read on first call; all false on a CPU that is not x86.
const CpuFeatures& cpu_features();

}  // namespace ridge
