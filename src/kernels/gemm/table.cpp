// The kernel tables, one per ISA, indexed by weight type: a type's whole story on an ISA
// in one row (what runs, the activations it wants, their quantizer). A table starts from
// the one below it and replaces the entries it has kernels of its own for, so an entry's
// isa always names the code that runs.
#include <array>

#include "kernels/gemm/table.h"
#include "kernels/gemm/amx.h"

namespace ridge::kernels {

namespace {

// The activation format a weight type's integer kernels read: 8-bit blocks of 32 for the
// legacy and runtime formats, Q8_K for the K-quants, floats for the float types.
ActFormat act_format(DType type) {
  switch (type) {
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::Q4_K_R16: return ActFormat::kQ8_K;
    case DType::F32:
    case DType::F16:
    case DType::BF16: return ActFormat::kF32;
    default: return ActFormat::kQ8_0;
  }
}

// Sets the entry of `type` in `table`: `gemm`, built for `isa`, with the type's activation
// format and that ISA's quantizer.
void put(GemmTable& table, Isa isa, DType type, GemmFn gemm) {
  const ActFormat act = act_format(type);
  table[dtype_slot(type)] = {isa, act, type_traits(type).block_size, act_quantizer(act, isa), gemm};
}

GemmTable scalar_table() {
  GemmTable t{};
  const Isa s = Isa::kScalar;
  put(t, s, DType::Q8_0, gemm_rows_scalar<vec_dot_q8_0_scalar>);
  put(t, s, DType::Q4_0, gemm_rows_scalar<vec_dot_q4_0_scalar>);
  put(t, s, DType::Q5_0, gemm_rows_scalar<vec_dot_q5_0_scalar>);
  put(t, s, DType::Q4_1, gemm_rows_scalar<vec_dot_q4_1_scalar>);
  put(t, s, DType::Q5_1, gemm_rows_scalar<vec_dot_q5_1_scalar>);
  put(t, s, DType::Q4_K, gemm_rows_scalar<vec_dot_q4_k_scalar>);
  put(t, s, DType::Q5_K, gemm_rows_scalar<vec_dot_q5_k_scalar>);
  put(t, s, DType::Q6_K, gemm_rows_scalar<vec_dot_q6_k_scalar>);
  put(t, s, DType::F32, gemm_rows_scalar<vec_dot_f32_scalar>);
  put(t, s, DType::F16, gemm_rows_scalar<vec_dot_f16_scalar>);
  put(t, s, DType::BF16, gemm_rows_scalar<vec_dot_bf16_scalar>);
  put(t, s, DType::NF4, gemm_rows_scalar<vec_dot_nf4_scalar>);
  put(t, s, DType::I8_ROWS, gemm_rows_scalar<vec_dot_i8_rows_scalar>);
  put(t, s, DType::Q4_K_R16, gemm_q4_k_r16_scalar);
  return t;
}

GemmTable avx2_table() {
  GemmTable t{};
  const Isa a = Isa::kAvx2;
  put(t, a, DType::Q8_0, gemm_q8_0_avx2);
  put(t, a, DType::Q4_0, gemm_q4_0_avx2);
  put(t, a, DType::Q5_0, gemm_q5_0_avx2);
  put(t, a, DType::Q4_1, gemm_q4_1_avx2);
  put(t, a, DType::Q5_1, gemm_q5_1_avx2);
  put(t, a, DType::Q4_K, gemm_q4_k_avx2);
  put(t, a, DType::Q5_K, gemm_q5_k_avx2);
  put(t, a, DType::Q6_K, gemm_q6_k_avx2);
  put(t, a, DType::F32, gemm_f32_avx2);
  put(t, a, DType::F16, gemm_f16_avx2);
  put(t, a, DType::BF16, gemm_bf16_avx2);
  put(t, a, DType::NF4, gemm_nf4_avx2);
  put(t, a, DType::I8_ROWS, gemm_i8_rows_avx2);
  put(t, a, DType::Q4_K_R16, gemm_q4_k_r16_avx2);  // the layout's kernel; Q4_K itself is not
                                                   // repacked here (gemm/avx2_repack.cpp)
  return t;
}

GemmTable avx_vnni_table() {
  GemmTable t = avx2_table();  // F32, F16, BF16, NF4, I8_ROWS: the AVX2 kernels
  const Isa v = Isa::kAvxVnni;
  put(t, v, DType::Q8_0, gemm_q8_0_avxvnni);
  put(t, v, DType::Q4_0, gemm_q4_0_avxvnni);
  put(t, v, DType::Q5_0, gemm_q5_0_avxvnni);
  put(t, v, DType::Q4_1, gemm_q4_1_avxvnni);
  put(t, v, DType::Q5_1, gemm_q5_1_avxvnni);
  put(t, v, DType::Q4_K, gemm_q4_k_avxvnni);
  put(t, v, DType::Q5_K, gemm_q5_k_avxvnni);
  put(t, v, DType::Q6_K, gemm_q6_k_avxvnni);
  return t;
}

GemmTable avx512_vnni_table() {
  GemmTable t = avx2_table();  // F32, F16, BF16: the AVX2 kernels (no AVX-VNNI needed)
  const Isa v = Isa::kAvx512Vnni;
  put(t, v, DType::Q8_0, gemm_q8_0_avx512);
  put(t, v, DType::Q4_0, gemm_q4_0_avx512);
  put(t, v, DType::Q5_0, gemm_q5_0_avx512);
  put(t, v, DType::Q4_1, gemm_q4_1_avx512);
  put(t, v, DType::Q5_1, gemm_q5_1_avx512);
  put(t, v, DType::Q4_K, gemm_q4_k_avx512);
  put(t, v, DType::Q5_K, gemm_q5_k_avx512);
  put(t, v, DType::Q6_K, gemm_q6_k_avx512);
  put(t, v, DType::NF4, gemm_nf4_avx512);
  put(t, v, DType::I8_ROWS, gemm_i8_rows_avx512);
  // Decode reads Q4_K faster from rows interleaved at load (gemm/avx512_repack.cpp).
  put(t, v, DType::Q4_K_R16, gemm_q4_k_r16_avx512);
  t[dtype_slot(DType::Q4_K)].repack = DType::Q4_K_R16;
  return t;
}

GemmTable amx_int8_table() {
  GemmTable t = avx512_vnni_table();  // F32, F16, BF16, Q4_K_R16: as there; the tile
                                      // kernels read the types as stored (no repack)
  // The tile kernels hand batches too small for the tiles, and every token past the last
  // whole 16-token tile, to the AVX-512 VNNI kernels (gemm/amx.h).
  const Isa x = Isa::kAmxInt8;
  put(t, x, DType::Q8_0, gemm_q8_0_amx);
  put(t, x, DType::Q4_0, gemm_q4_0_amx);
  put(t, x, DType::Q5_0, gemm_q5_0_amx);
  put(t, x, DType::Q4_1, gemm_q4_1_amx);
  put(t, x, DType::Q5_1, gemm_q5_1_amx);
  put(t, x, DType::Q4_K, gemm_q4_k_amx);
  put(t, x, DType::Q5_K, gemm_q5_k_amx);
  put(t, x, DType::Q6_K, gemm_q6_k_amx);
  put(t, x, DType::NF4, gemm_nf4_amx);
  put(t, x, DType::I8_ROWS, gemm_i8_rows_amx);
  return t;
}

}  // namespace

const GemmTable& gemm_table(Isa isa) {
  static_assert(static_cast<int>(Isa::kAmxInt8) == kIsaCount - 1, "tables in Isa order");
  static const std::array<GemmTable, kIsaCount> tables = {scalar_table(), avx2_table(), avx_vnni_table(),
                                                          avx512_vnni_table(), amx_int8_table()};
  return tables[static_cast<size_t>(isa)];
}

const GemmKernel* gemm_kernel(DType weight, Isa isa) {
  const uint32_t slot = dtype_slot(weight);
  if (slot >= kDTypeSlots) return nullptr;
  const GemmKernel& k = gemm_table(isa)[slot];
  return k.gemm != nullptr ? &k : nullptr;
}

}  // namespace ridge::kernels
