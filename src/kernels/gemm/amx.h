// The AMX-INT8 GEMM's table entries and activation layouts (amx_panels.cpp, amx_rows.cpp;
// whether the tiles are usable: amx_usable() in isa.h), for prefill and batched decode on
// CPUs with Intel's tile unit (Sapphire Rapids and later: the `amx_int8` CPU flag).
//
// One TDPBSSD multiplies a 16 x 64 tile of int8 activations by a 64 x 16 tile of int8
// weights into 16 x 16 int32 sums: 16384 multiply-adds, against 64 for one AVX-512
// vpdpbusd. The weights stay as they lie in the GGUF file (zero-copy, nothing repacked at
// load); each thread unpacks a panel of 16 rows into the tile layout in L2 and runs every
// 16-token tile of the batch over it.
//
//   if (amx_usable()) gemm_q4_k_amx(args, n_rows, n_tokens);   // as any GemmFn
//   else std::cerr << amx_status() << "\n";                      // why not
//
// Every output equals the scalar reference bit for bit (reference.cpp): the tiles produce the
// exact integer block dot products, then the float scales apply per block in block order
// as there. Tokens past the last whole 16-token tile, and batches too small to repay
// unpacking the panels (below 16 tokens; 32 for the K-quants), run on the AVX-512 VNNI
// kernels, which are bit-identical too. Except Q8_0, Q4_0, Q5_0, Q4_K and Q6_K at 16-31
// tokens (batched decode): one token tile, with the weight rows as the tiles' first
// operand, unpacked without being transposed (amx_rows.cpp).
#pragma once

#include <cstdint>

#include "kernels/gemm/gemm.h"
#include "kernels/gemm/table.h"

namespace ridge::kernels {

// The GemmFn entries for the AMX table. Call only when amx_usable(); they throw
// otherwise. Each thread loads its tile configuration on entry.
void gemm_q8_0_amx(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);
void gemm_q4_0_amx(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);
void gemm_q5_0_amx(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);
void gemm_q4_1_amx(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);
void gemm_q5_1_amx(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);
void gemm_q4_k_amx(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);
void gemm_q5_k_amx(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);
void gemm_q6_k_amx(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);
// NF4 and I8_ROWS (core/quant_bnb.h) on the same tiles as Q8_0, from their AVX-512 panels.
void gemm_nf4_amx(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);
void gemm_i8_rows_amx(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);

// The activations as the tiles read them: per 16-token tile and block, the 16 tokens'
// bytes contiguous, then their scales (and for kQ8_K their sub-block sums). A matmul
// lays them out once and passes them in GemmArgs::amx_tiles, instead of every call (a
// share of the rows) laying out all tokens again. Bytes of one tile, for kQ8_0 or kQ8_K
// activations of n_in elements; and the layout of tiles [begin, end) of a batch into
// `tiles` (tile i at i * amx_act_tile_bytes).
size_t amx_act_tile_bytes(ActFormat format, int64_t n_in);
void amx_build_act_tiles(ActFormat format, const uint8_t* act, size_t act_stride, int64_t n_in, int64_t begin,
                         int64_t end, uint8_t* tiles);

// A batch of one token tile (16-31 tokens) runs the kernels that take the weight rows as
// the tiles' first operand (Q8_0, Q4_0, Q5_0, Q4_K, Q6_K); they read the tile's tokens
// transposed as the second. A matmul lays that out once too (GemmArgs::amx_rows_b),
// instead of every call (the matmul runs in 8 calls per thread): bytes, and the layout
// from tile 0 of amx_build_act_tiles.
size_t amx_rows_b_bytes(ActFormat format, int64_t n_in);
void amx_build_rows_b(ActFormat format, const uint8_t* tiles, int64_t n_in, uint8_t* out);

}  // namespace ridge::kernels
