// Whether the AMX tiles may be used: the CPU's flags, the OS's tile state and the
// process's permission for it (isa.h). The kernels are in gemm/amx_panels.cpp and
// gemm/amx_rows.cpp, and attention/tile_amx.cpp.
#include <string>

#include "kernels/isa.h"

#include <cerrno>
#include <cstring>

#if defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "core/cpu_features.h"
#include "core/error.h"

namespace ridge::kernels {

namespace {

struct AmxState {
  bool usable = false;
  std::string status;
};

#if defined(__x86_64__)
// Linux's arch_prctl codes and the tile data state component (asm/prctl.h, the XSAVE
// feature numbers); Debian's headers may predate them.
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

AmxState probe_amx() {
  const CpuFeatures& f = cpu_features();
  if (!f.amx_tile || !f.amx_int8) return {false, "AMX not used: no amx_int8 in this CPU"};
  if (!cpu_supports(Isa::kAvx512Vnni))
    return {false, "AMX not used: the CPU lacks the AVX-512 VNNI set it runs beside"};
  if (!f.os_amx) return {false, "AMX not used: the OS does not enable the tile state (XCR0)"};
  // Linux hands out the 8 KiB of tile data per thread only on request, for the whole
  // process; without it the first tile instruction dies with SIGILL.
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0)
    return {false, str_cat("AMX not used: the kernel refused the tile data permission (arch_prctl: ",
                           std::strerror(errno), ")")};
  return {true, "AMX-INT8 usable"};
}
#else
AmxState probe_amx() { return {false, "AMX not used: not an x86-64 build"}; }
#endif

const AmxState& amx_state() {
  static const AmxState state = probe_amx();
  return state;
}

}  // namespace

bool amx_usable() { return amx_state().usable; }

const std::string& amx_status() { return amx_state().status; }

}  // namespace ridge::kernels
