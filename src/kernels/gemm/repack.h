// Weight layouts repacked once at load for the matrix-vector kernels (decode); the calls
// the rest of ridge makes (repack, repack_target, ...) are declared in gemm.h. Q4_K
// becomes DType::Q4_K_R16: the blocks of 16 rows side
// by side, so one 64-byte load holds 4 bytes of each of 16 rows, one broadcast activation
// dword feeds all 16 (vpdpbusd), and no horizontal sum is left per block. A kernel table
// entry names the layout its ISA runs a type from (GemmKernel::repack, table.h).
//
//   if (std::optional<DType> to = repack_target(w.dtype, best_isa()); to && weight_repack_enabled()) {
//     RepackedBytes bytes = allocate_repacked(repacked_bytes(*to, w.n_in, w.n_out));
//     const WeightMatrix r = repack(w, *to, bytes.get());  // matmul(r, ...) == matmul(w, ...)
//   }
//
// The Q4_K_R16 layout, per group of 16 rows (rows 16g .. 16g + 15; a last group with
// fewer rows is padded with zero rows) and per 256-element block b, 2304 bytes
// (16 x 144, so a group of nb blocks is 16 rows' worth of Q4_K bytes and row 16g starts
// at data + 16g * row_bytes, as in the file):
//   [0, 32)      d of the 16 rows (f16), row r at 2r
//   [32, 64)     dmin of the 16 rows (f16)
//   [64, 256)    the 12 packed scale/min bytes as 3 dwords: dword k of row r at 64 + 64k + 4r
//   [256, 2304)  qs as 32 dwords: dword v (qs bytes 4v .. 4v + 3) of row r at 256 + 64v + 4r
// Dword v of chunk j = v / 8 holds, in its low nibbles, elements 64j + 4(v % 8) + 0..3
// (sub-block 2j) and in its high nibbles elements 64j + 32 + 4(v % 8) + 0..3 (sub-block
// 2j + 1), as Q4_K's qs bytes do. Every bit of every Q4_K block is kept; only the order
// changes, and the kernels compute exactly the Q4_K reference's arithmetic.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/gemm/gemm.h"

namespace ridge::kernels {

inline constexpr int64_t kRepackRows = 16;  // rows interleaved in a group

// Whether a type is an interleaved layout (rows not contiguous; no row-wise to_float).
bool is_repacked_type(DType type);

// Row r of a repacked matrix back in its source type's bytes (a Q4_K row of row_bytes),
// and as floats (the source type's to_float): for the dequantizing paths and tests.
void unpack_row(const WeightMatrix& w, int64_t r, uint8_t* dst);
void repacked_row_to_float(const WeightMatrix& w, int64_t r, float* dst);

}  // namespace ridge::kernels
