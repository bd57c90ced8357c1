// The repacked layouts (gemm/repack.h): the repacker, the unpacker, and the scalar
// reference over Q4_K_R16, which is the Q4_K reference on each row unpacked.
#include "kernels/gemm/repack.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/quant_blocks.h"
#include "kernels/gemm/table.h"

namespace ridge::kernels {

namespace {

std::atomic<bool> g_weight_repack{true};

// Byte offsets inside a Q4_K_R16 block group (repack.h).
constexpr size_t kGroupD = 0, kGroupDmin = 32, kGroupScales = 64, kGroupQs = 256;
constexpr size_t kGroupBytes = kRepackRows * sizeof(BlockQ4_K);
static_assert(sizeof(BlockQ4_K) == 144 && kGroupQs + 32 * 64 == kGroupBytes, "Q4_K_R16 block group");

// Where byte i of row r's Q4_K block lies in its block group, for i over the 144 bytes
// (d, dmin, scales, qs in BlockQ4_K order).
size_t group_offset(int r, size_t i) {
  if (i < 2) return kGroupD + 2 * r + i;
  if (i < 4) return kGroupDmin + 2 * r + (i - 2);
  if (i < 16) return kGroupScales + 64 * ((i - 4) / 4) + 4 * r + (i - 4) % 4;
  const size_t q = i - 16;
  return kGroupQs + 64 * (q / 4) + 4 * r + q % 4;
}

void check_q4_k_r16(const WeightMatrix& w, const char* what) {
  if (w.dtype != DType::Q4_K_R16) throw Error(str_cat(what, ": matrix is ", dtype_name(w.dtype), ", not q4_K_r16"));
}

}  // namespace

void set_weight_repack(bool enabled) { g_weight_repack.store(enabled, std::memory_order_relaxed); }
bool weight_repack_enabled() { return g_weight_repack.load(std::memory_order_relaxed); }

std::optional<DType> repack_target(DType type, Isa isa) {
  const GemmKernel* k = gemm_kernel(type, isa);
  return k != nullptr ? k->repack : std::nullopt;
}

bool is_repacked_type(DType type) { return type == DType::Q4_K_R16; }

void RepackedBytesFree::operator()(uint8_t* p) const { std::free(p); }

RepackedBytes allocate_repacked(size_t bytes) {
  constexpr size_t kHugePage = size_t{2} << 20;
  const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  RepackedBytes p(static_cast<uint8_t*>(std::aligned_alloc(kHugePage, rounded)));
  if (!p) throw Error(str_cat("repack: cannot allocate ", rounded, " bytes for repacked weights"));
  ::madvise(p.get(), rounded, MADV_HUGEPAGE);  // advice: without it, 4 KiB pages work the same
  return p;
}

size_t repacked_bytes(DType repacked, int64_t n_in, int64_t n_out) {
  if (repacked != DType::Q4_K_R16) throw Error(str_cat("repacked_bytes: ", dtype_name(repacked), " is not a repacked layout"));
  const int64_t groups = (n_out + kRepackRows - 1) / kRepackRows;
  return static_cast<size_t>(groups * kRepackRows) * row_size(DType::Q4_K, n_in);
}

WeightMatrix repack(const WeightMatrix& w, DType repacked, uint8_t* dst, ThreadPool* pool) {
  check_weight_matrix(w, "repack");
  if (repacked != DType::Q4_K_R16 || w.dtype != DType::Q4_K)
    throw Error(str_cat("repack: no layout ", dtype_name(repacked), " for ", dtype_name(w.dtype), " weights"));
  const int64_t nb = w.n_in / kQK_K;
  const size_t row_bytes = row_size(DType::Q4_K, w.n_in);
  const int64_t groups = (w.n_out + kRepackRows - 1) / kRepackRows;
  auto run = [&](int64_t g_begin, int64_t g_end, int) {
    for (int64_t g = g_begin; g < g_end; ++g) {
      uint8_t* group = dst + static_cast<size_t>(g) * kRepackRows * row_bytes;
      const int rows = static_cast<int>(std::min<int64_t>(kRepackRows, w.n_out - g * kRepackRows));
      if (rows < kRepackRows) std::memset(group, 0, kRepackRows * row_bytes);  // padding rows stay zero
      // Block by block, so the writes stay within one 2304-byte block group.
      for (int64_t b = 0; b < nb; ++b) {
        uint8_t* out = group + b * kGroupBytes;
        for (int r = 0; r < rows; ++r) {
          const uint8_t* src = w.data + static_cast<size_t>(g * kRepackRows + r) * w.row_bytes + b * sizeof(BlockQ4_K);
          std::memcpy(out + kGroupD + 2 * r, src, 2);
          std::memcpy(out + kGroupDmin + 2 * r, src + 2, 2);
          for (int k = 0; k < 3; ++k) std::memcpy(out + kGroupScales + 64 * k + 4 * r, src + 4 + 4 * k, 4);
          for (int v = 0; v < 32; ++v) std::memcpy(out + kGroupQs + 64 * v + 4 * r, src + 16 + 4 * v, 4);
        }
      }
    }
  };
  if (pool != nullptr) pool->parallel_for(groups, run);
  else run(0, groups, 0);
  return {DType::Q4_K_R16, w.n_in, w.n_out, dst, row_bytes};
}

void unpack_row(const WeightMatrix& w, int64_t r, uint8_t* dst) {
  check_q4_k_r16(w, "unpack_row");
  const uint8_t* group = w.data + static_cast<size_t>(r / kRepackRows) * kRepackRows * w.row_bytes;
  const int lane = static_cast<int>(r % kRepackRows);
  for (int64_t b = 0; b < w.n_in / kQK_K; ++b)
    for (size_t i = 0; i < sizeof(BlockQ4_K); ++i)
      dst[b * sizeof(BlockQ4_K) + i] = group[b * kGroupBytes + group_offset(lane, i)];
}

void repacked_row_to_float(const WeightMatrix& w, int64_t r, float* dst) {
  thread_local std::vector<uint8_t> row;  // grown once per thread: a --matmul float step allocates nothing
  if (row.size() < w.row_bytes) row.resize(w.row_bytes);
  unpack_row(w, r, row.data());
  type_traits(DType::Q4_K).to_float(row.data(), dst, w.n_in);
}

void gemm_q4_k_r16_scalar(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  // The reference: each row unpacked to its Q4_K bytes, then Q4_K's vec_dot. A per-thread
  // row buffer, grown once, so a scalar run allocates nothing per step.
  thread_local std::vector<uint8_t> row;
  const size_t row_bytes = a.w_stride;
  if (row.size() < row_bytes) row.resize(row_bytes);
  const WeightMatrix w{DType::Q4_K_R16, a.n_in, n_rows, a.w, row_bytes};
  for (int64_t r = 0; r < n_rows; ++r) {
    unpack_row(w, r, row.data());
    for (int64_t t = 0; t < n_tokens; ++t)
      a.y[t * a.ldy + r] = vec_dot_q4_k_scalar(a.n_in, row.data(), a.act + t * a.act_stride);
  }
}

}  // namespace ridge::kernels
