// The AMX tile configuration and the tile instructions as inline asm, shared by the
// AMX-INT8 GEMM (gemm/amx_panels.cpp) and the AMX-BF16 attention step
// (attention/tile_amx.cpp). GCC 12 pitfalls this avoids: _tile_loadconfig drops the stores
// that fill the config (ldtilecfg below names the whole struct as its operand), and the
// tile numbers must be literals (pasted into the asm). Tile registers hold no state
// between calls: each kernel call loads its own configuration, since a pool thread may
// have run the other family last.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <utility>

namespace ridge::kernels {
namespace {

// The 64-byte tile configuration of palette 1: tile i is rows[i] x colsb[i] bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tile i gets shapes[i] = {rows, bytes per row}.
inline void configure_tiles(std::initializer_list<std::pair<int, int>> shapes) {
  TileConfig config;
  int i = 0;
  for (const auto& [rows, colsb] : shapes) {
    config.rows[i] = static_cast<uint8_t>(rows);
    config.colsb[i] = static_cast<uint16_t>(colsb);
    ++i;
  }
  // Not _tile_loadconfig: GCC 12 does not count its builtin as reading the struct and
  // drops the stores that fill it. The asm's memory operand is the whole struct.
  __asm__ volatile("ldtilecfg %0" : : "m"(config));
}

}  // namespace
}  // namespace ridge::kernels

// Tile loads and stores of contiguous bytes, as GCC's _tile_loadd/_tile_stored but naming
// the bytes they read or write instead of clobbering all memory: with the clobber, every
// accumulator the GEMM keeps in registers went through the stack around each tile
// instruction. T is a literal tile number (pasted into the asm); a store writes 16 rows
// of 64 bytes.
#define RIDGE_TILE_LOAD(T, ptr, row_bytes, bytes)                    \
  __asm__ volatile("tileloadd (%1,%2,1), %%tmm" #T                 \
                   :                                               \
                   : "m"(*reinterpret_cast<const uint8_t(*)[bytes]>(ptr)), "r"(ptr), "r"(long{row_bytes}))
#define RIDGE_TILE_STORE(T, ptr)                                     \
  __asm__ volatile("tilestored %%tmm" #T ", (%1,%2,1)"             \
                   : "=m"(*reinterpret_cast<uint8_t(*)[16 * 64]>(ptr)) \
                   : "r"(ptr), "r"(64L))

// Strided tile loads and stores whose rows are `stride` bytes apart, for kernels that keep
// no vector registers live across their tile loops: they clobber all memory (the rows'
// extent is known only at run time), which orders them after the vector stores that
// filled the operands and before the loads that read the results. The GEMM, whose
// accumulators stay in registers around its tile instructions, uses RIDGE_TILE_LOAD/STORE
// above, with exact memory operands, instead.
#define RIDGE_TILE_LOAD_STRIDED(T, ptr, stride) \
  __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #T : : "r"(ptr), "r"(static_cast<long>(stride)) : "memory")
#define RIDGE_TILE_STORE_STRIDED(T, ptr, stride) \
  __asm__ volatile("tilestored %%tmm" #T ", (%0,%1,1)" : : "r"(ptr), "r"(static_cast<long>(stride)) : "memory")
#define RIDGE_TILE_ZERO(T) __asm__ volatile("tilezero %%tmm" #T ::)
// C += A * B over bf16 pairs, f32 accumulators (AMX-BF16).
#define RIDGE_TILE_DPBF16PS(C, A, B) __asm__ volatile("tdpbf16ps %%tmm" #B ", %%tmm" #A ", %%tmm" #C ::)
