// Quick measurements of the machine ridge runs on, for rooflines (`ridge roofline --device
// this`) and `ridge bench`'s fractions of bandwidth and of compute peak reached.
//
//   double gbs = measure_read_bandwidth_gbs(4);        // streaming reads, GB/s (10^9 B/s)
//   PeakEstimate peak = estimate_peak_flops(4);       // AVX2 FMA throughput, measured
//   DeviceSpec cpu = this_machine(4);                 // both, plus physical memory
//   ComputePeak p = measure_compute_peak(4);          // int8 and f32 ops/s, the kernels' ISA
//
// Bandwidth: each thread sums its own contiguous slice of one large buffer (far larger
// than the last-level cache) with 64-bit adds the compiler vectorizes; the best of a few
// passes, total bytes / wall time. This is what decode does to weights: read each byte once.
//
// Peak: each thread runs 12 independent chains of 8-wide fp32 fused multiply-adds (enough
// to cover FMA latency on both FMA pipes); FLOP/s = threads x iterations x 12 x 8 x 2 / time.
// A core with two 256-bit FMA pipes peaks at 2 x 8 x 2 = 32 FLOP/cycle, so the measured
// rate also gives the clock it implies (measured / (threads x 32)).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/isa.h"
#include "plan/roofline.h"

namespace ridge::plan {

// threads >= 1. buffer_bytes: the whole buffer, split over threads; repeats: passes timed.
double measure_read_bandwidth_gbs(int threads, size_t buffer_bytes = size_t{1} << 30, int repeats = 5);

struct PeakEstimate {
  double flops = 0.0;            // FLOP/s measured (fp32 FMA); 0 when the CPU lacks AVX2+FMA
  int threads = 0;
  int flops_per_cycle_per_core = 32;  // 2 FMA pipes x 8 fp32 lanes x 2 FLOP
  double implied_clock_ghz = 0.0;     // flops / (threads x flops_per_cycle_per_core)
  double nominal_clock_ghz = 0.0;     // /proc/cpuinfo "cpu MHz" of cpu 0; 0 if unknown
  std::string method;                 // one sentence on how the number was obtained
};

// Runs for about `seconds` of wall time.
PeakEstimate estimate_peak_flops(int threads, double seconds = 0.2);

// The machine as a DeviceSpec: measured peak and bandwidth, physical RAM as its memory.
DeviceSpec this_machine(int threads);

// The compute roofline (`ridge bench`): the most int8 and f32 arithmetic the cores can
// issue with an ISA's instructions, from register-only loops (no memory traffic): each
// thread runs 12 independent chains (6 for AVX2's three-instruction int8 step) so the
// pipes, not the latencies, set the rate. One multiply-add is 2 ops.
//   int8: avx512_vnni vpdpbusd zmm (64 multiply-adds); avx_vnni vpdpbusd ymm (32); avx2
//         vpmaddubsw + vpmaddwd + vpaddd (32); amx_int8 for now the avx512_vnni loop.
//   f32:  vfmadd zmm (16 lanes) on avx512_vnni and amx_int8, ymm (8) on avx2 and avx_vnni.
// scalar has no SIMD loop: both peaks are 0 there (bench then prints no percentage).
struct ComputePeak {
  std::string isa;       // the ISA the peak is for: "avx512_vnni" (kernels::isa_name)
  std::string int8_isa;  // whose int8 instructions were timed (amx_int8: avx512_vnni for now)
  int threads = 0;
  double int8_ops_per_s = 0;   // 2 x int8 multiply-adds per second
  double f32_flops_per_s = 0;  // 2 x f32 fused multiply-adds per second
  std::string int8_method;     // the instruction timed: "vpdpbusd zmm"
  std::string f32_method;      // "vfmadd231ps zmm"
};

// Runs for about 2 x `seconds`; throws ridge::Error unless threads >= 1 and
// kernels::cpu_supports(isa). Without an isa: the one the kernels run, kernels::best_isa().
ComputePeak measure_compute_peak(kernels::Isa isa, int threads, double seconds = 0.1);
ComputePeak measure_compute_peak(int threads, double seconds = 0.1);

// Arithmetic per token, by the units it runs on (ops = 2 x multiply-adds).
struct ComputeWork {
  double int8_ops = 0;  // integer GEMMs (8-bit activations)
  double f32_ops = 0;   // float dots (F32 weights, types dequantized to f32, F16/BF16)
};

// The percentage of the compute roofline reached doing `work` per token at tokens_per_s:
// the seconds the work takes at the peaks (int8 ops at the int8 peak, f32 at the f32 peak)
// over the seconds it took. 0 when there is no work or a part of it has no peak.
double compute_roofline_pct(const ComputeWork& work, double tokens_per_s, const ComputePeak& peak);

// Internal: the register-only loops (probe_avx2.cpp, probe_avxvnni.cpp, probe_avx512.cpp).
// Each returns a value that depends on every instruction so the compiler keeps them.
// fma_chains_*: iterations x 12 vector FMAs; int8 loops: iterations x 12 (AVX2: 6) steps.
float fma_chains_avx2(long iterations);
float fma_chains_avx512(long iterations);
int32_t int8_chains_avx2(long iterations);
int32_t int8_chains_avxvnni(long iterations);
int32_t int8_chains_avx512(long iterations);

}  // namespace ridge::plan
