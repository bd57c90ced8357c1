// Quick measurements of the machine ridge runs on, for rooflines (`ridge roofline --device
// this`) and, later, `ridge bench`'s fraction of bandwidth reached.
//
//   double gbs = measure_read_bandwidth_gbs(4);        // streaming reads, GB/s (10^9 B/s)
//   PeakEstimate peak = estimate_peak_flops(4);       // AVX2 FMA throughput, measured
//   DeviceSpec cpu = this_machine(4);                 // both, plus physical memory
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
#include <string>

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

// Internal: the AVX2 FMA kernel (probe_avx2.cpp). Returns a value that depends on every
// FMA so the compiler keeps them; does iterations x 12 x 8 FMAs.
float fma_chains_avx2(long iterations);
bool cpu_has_avx2_fma();

}  // namespace ridge::plan
