#include "kernels/isa.h"

#include <cstdlib>

#include "core/cpu_features.h"
#include "core/error.h"

namespace ridge::kernels {

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvxVnni: return "avx_vnni";
    case Isa::kAvx512Vnni: return "avx512_vnni";
    case Isa::kAmxInt8: return "amx_int8";
  }
  return "unknown";
}

std::optional<Isa> isa_from_name(std::string_view name) {
  for (Isa isa : kAllIsas)
    if (name == isa_name(isa)) return isa;
  return std::nullopt;
}

bool cpu_supports(Isa isa) {
  const CpuFeatures& f = cpu_features();
  const bool avx2 = f.avx2 && f.fma && f.f16c && f.os_avx;
  const bool avx512 = avx2 && f.os_avx512 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq &&
                      f.avx512_vnni && f.avx512_bitalg;
  switch (isa) {
    case Isa::kScalar: return true;
    case Isa::kAvx2: return avx2;
    case Isa::kAvxVnni: return avx2 && f.avx_vnni;
    case Isa::kAvx512Vnni: return avx512;
    case Isa::kAmxInt8: return avx512 && f.amx_tile && f.amx_int8 && f.os_amx && amx_usable();
  }
  return false;
}

Isa cpu_best_isa() {
  static const Isa best = [] {
    Isa b = Isa::kScalar;
    for (Isa isa : kAllIsas)
      if (cpu_supports(isa)) b = isa;
    return b;
  }();
  return best;
}

void require_isa(Isa isa, std::string_view what) {
  if (!cpu_supports(isa))
    throw Error(str_cat(what, ": this CPU has no ", isa_name(isa), " (the best it supports is ",
                        isa_name(cpu_best_isa()), ")"));
}

Isa isa_from_env_value(const char* value) {
  if (value == nullptr || *value == '\0') return cpu_best_isa();
  const std::optional<Isa> isa = isa_from_name(value);
  if (!isa)
    throw Error(str_cat("RIDGE_ISA=", value, ": not an ISA; use scalar, avx2, avx_vnni, avx512_vnni or amx_int8 "
                        "(this CPU's best is ", isa_name(cpu_best_isa()), ")"));
  require_isa(*isa, str_cat("RIDGE_ISA=", value));
  return *isa;
}

Isa best_isa() {
  // A throwing initializer leaves the static unset, so every call reports the error.
  static const Isa isa = isa_from_env_value(std::getenv("RIDGE_ISA"));
  return isa;
}

}  // namespace ridge::kernels
