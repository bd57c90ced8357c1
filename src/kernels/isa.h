// Which instruction set the kernels run with: each Isa names code that actually runs,
// chosen once at run time from cpu_features() (the best the CPU and OS support), or
// forced lower with RIDGE_ISA=scalar|avx2|avx_vnni|avx512_vnni|amx_int8 for tests and
// comparisons. Tests and benchmarks also pass an Isa explicitly (matmul_isa, attention_isa)
// to check each fast path against its scalar reference on the same machine.
//
//   const Isa isa = best_isa();                  // e.g. Isa::kAvx512Vnni
//   std::printf("%s\n", isa_name(isa));          // "avx512_vnni"
//   for (Isa i : kAllIsas) if (cpu_supports(i)) ...
//
// The levels, each a superset of the one before except where noted:
//   kScalar       portable C++, the references
//   kAvx2         AVX2 + FMA + F16C
//   kAvxVnni      kAvx2 + AVX-VNNI (vpdpbusd on ymm)
//   kAvx512Vnni   kAvx2 + AVX-512 F/BW/VL/DQ/VNNI/BITALG (Ice Lake, Zen 4 and later; need
//                 not have AVX-VNNI: its kernels use none)
//   kAmxInt8      kAvx512Vnni + AMX-TILE + AMX-INT8 with the OS's tile state
// Attention's AVX-512 loops run on kAvx512Vnni and kAmxInt8, its AVX2 loops on kAvx2 and
// kAvxVnni; kAmxInt8 runs f16 caches on the AMX-BF16 tiles where the CPU has them. Q8_0/Q4_0
// caches take a tiled VNNI step on kAvx512Vnni and kAmxInt8, the per-row loops below that.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace ridge::kernels {

enum class Isa { kScalar, kAvx2, kAvxVnni, kAvx512Vnni, kAmxInt8 };
inline constexpr Isa kAllIsas[] = {Isa::kScalar, Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512Vnni, Isa::kAmxInt8};
inline constexpr int kIsaCount = 5;

// "scalar", "avx2", "avx_vnni", "avx512_vnni", "amx_int8" (RIDGE_ISA's spelling).
const char* isa_name(Isa isa);
std::optional<Isa> isa_from_name(std::string_view name);

// Whether this CPU (and OS) can run the ISA's kernels.
bool cpu_supports(Isa isa);

// The best ISA this CPU supports, whatever RIDGE_ISA says.
Isa cpu_best_isa();

// The ISA the kernels run with: RIDGE_ISA when set, else cpu_best_isa(). Read once;
// throws ridge::Error (every call) when RIDGE_ISA names no ISA or one this CPU lacks.
Isa best_isa();

// The ISA RIDGE_ISA names, or cpu_best_isa() when it is unset or empty; throws
// ridge::Error naming the value and the CPU's best when it is unknown or unsupported.
// best_isa() is this of the environment's value; exposed for tests.
Isa isa_from_env_value(const char* value);

// Throws ridge::Error naming `what`, the ISA and the CPU's best ISA unless cpu_supports(isa).
void require_isa(Isa isa, std::string_view what);

// True when the CPU has AMX-TILE and AMX-INT8, the OS enables tile state (XCR0), and
// the process was granted the tile data permission (arch_prctl ARCH_REQ_XCOMP_PERM,
// requested once, on the first call). The AVX-512 VNNI kernels must be usable too.
// (amx_state.cpp)
bool amx_usable();

// "AMX-INT8 usable", or the reason it is not ("no amx_int8 in this CPU", "the kernel
// refused the tile data permission: ...").
const std::string& amx_status();

// The ISA families a kernel may take from (an Isa that has them runs their code).
inline bool isa_has_avx2(Isa isa) { return isa != Isa::kScalar; }
inline bool isa_has_avx512(Isa isa) { return isa == Isa::kAvx512Vnni || isa == Isa::kAmxInt8; }

}  // namespace ridge::kernels
