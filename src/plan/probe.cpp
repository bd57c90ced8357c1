#include "plan/probe.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/gemm/gemm.h"
#include "plan/units.h"

namespace ridge::plan {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Sum of 64-bit words; plain adds over a contiguous range vectorize to full-width loads.
uint64_t sum_words(const uint64_t* words, size_t n) {
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += words[i];
    s1 += words[i + 1];
    s2 += words[i + 2];
    s3 += words[i + 3];
  }
  for (; i < n; ++i) s0 += words[i];
  return s0 + s1 + s2 + s3;
}

double nominal_clock_ghz() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("cpu MHz", 0) != 0) continue;
    size_t colon = line.find(':');
    if (colon == std::string::npos) return 0.0;
    try {
      return std::stod(line.substr(colon + 1)) / 1000.0;
    } catch (const std::exception&) {
      return 0.0;
    }
  }
  return 0.0;
}

// Runs kernel(iterations) on each of `threads` threads at once: grows the iteration count
// until a run takes a measurable time, sizes the timed runs to `seconds` in all, and
// returns the best rate, ops_per_iteration x iterations x threads per second.
template <class Kernel>
double best_rate(int threads, double seconds, double ops_per_iteration, Kernel kernel) {
  ThreadPool pool(threads);
  std::vector<double> sinks(static_cast<size_t>(threads));
  auto run = [&](long iterations) {
    const auto start = Clock::now();
    pool.parallel_for(threads, [&](int64_t, int64_t, int thread) { sinks[thread] += kernel(iterations); });
    return seconds_since(start);
  };
  long iterations = 1 << 16;
  double t = run(iterations);
  while (t < 0.01 && iterations < (1L << 34)) t = run(iterations *= 4);
  iterations = std::max(1L, static_cast<long>(static_cast<double>(iterations) * (seconds / 4) / t));
  double best = 0.0;
  for (int r = 0; r < 4; ++r) best = std::max(best, static_cast<double>(iterations) * ops_per_iteration * threads / run(iterations));
  volatile double sink = sinks[0];  // the results must be used or the loops could go
  (void)sink;
  return best;
}

}  // namespace

double measure_read_bandwidth_gbs(int threads, size_t buffer_bytes, int repeats) {
  if (threads < 1) throw Error(str_cat("bandwidth probe: threads must be >= 1, got ", threads));
  if (repeats < 1) throw Error(str_cat("bandwidth probe: repeats must be >= 1, got ", repeats));
  const size_t n_words = std::max<size_t>(buffer_bytes / sizeof(uint64_t), static_cast<size_t>(threads) * 64);
  std::unique_ptr<uint64_t[]> buffer(new uint64_t[n_words]);
  ThreadPool pool(threads);
  // Each thread first-touches the slice it will read, so on NUMA machines its pages are local.
  pool.parallel_for(static_cast<int64_t>(n_words), [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) buffer[i] = static_cast<uint64_t>(i);
  });
  std::vector<uint64_t> sums(static_cast<size_t>(threads));
  double best = 0.0;
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    pool.parallel_for(static_cast<int64_t>(n_words), [&](int64_t begin, int64_t end, int thread) {
      sums[thread] += sum_words(buffer.get() + begin, static_cast<size_t>(end - begin));
    });
    const double seconds = seconds_since(start);
    best = std::max(best, static_cast<double>(n_words * sizeof(uint64_t)) / seconds / kGB);
  }
  // The sums must be used or the reads could be optimized away.
  uint64_t check = 0;
  for (uint64_t s : sums) check ^= s;
  volatile uint64_t sink = check;
  (void)sink;
  return best;
}

PeakEstimate estimate_peak_flops(int threads, double seconds) {
  if (threads < 1) throw Error(str_cat("FLOP/s probe: threads must be >= 1, got ", threads));
  PeakEstimate e;
  e.threads = threads;
  e.nominal_clock_ghz = nominal_clock_ghz();
  if (!kernels::cpu_supports(kernels::Isa::kAvx2)) {
    e.method = "this CPU has no AVX2+FMA; give the peak with --peak-gflops";
    return e;
  }
  const double best = best_rate(threads, seconds, 12 * 8 * 2, fma_chains_avx2);
  e.flops = best;
  e.implied_clock_ghz = best / (threads * e.flops_per_cycle_per_core) / 1e9;
  e.method = str_cat("measured: ", threads, " threads x 12 chains of 8-wide fp32 AVX2 FMA; a core with 2 FMA pipes "
                     "does 2 x 8 x 2 = 32 FLOP/cycle, so this implies ",
                     format_fixed(e.implied_clock_ghz, 2), " GHz",
                     e.nominal_clock_ghz > 0 ? str_cat(" (/proc/cpuinfo says ", format_fixed(e.nominal_clock_ghz, 2), " GHz)") : "");
  return e;
}

ComputePeak measure_compute_peak(kernels::Isa isa, int threads, double seconds) {
  using kernels::Isa;
  if (threads < 1) throw Error(str_cat("compute peak probe: threads must be >= 1, got ", threads));
  kernels::require_isa(isa, "compute peak probe");
  ComputePeak p;
  p.threads = threads;
  p.isa = p.int8_isa = kernels::isa_name(isa);
  switch (isa) {
    case Isa::kScalar:
      return p;
    case Isa::kAvx2:
      p.int8_ops_per_s = best_rate(threads, seconds, 6 * 32 * 2, int8_chains_avx2);
      p.int8_method = "vpmaddubsw + vpmaddwd ymm";
      break;
    case Isa::kAvxVnni:
      p.int8_ops_per_s = best_rate(threads, seconds, 12 * 32 * 2, int8_chains_avxvnni);
      p.int8_method = "vpdpbusd ymm";
      break;
    case Isa::kAmxInt8:
      p.int8_ops_per_s = kernels::amx_int8_peak_ops_per_s(threads, seconds);
      p.int8_method = "tdpbssd";
      break;
    case Isa::kAvx512Vnni:
      p.int8_ops_per_s = best_rate(threads, seconds, 12 * 64 * 2, int8_chains_avx512);
      p.int8_method = "vpdpbusd zmm";
      break;
  }
  if (kernels::isa_has_avx512(isa)) {
    p.f32_flops_per_s = best_rate(threads, seconds, 12 * 16 * 2, fma_chains_avx512);
    p.f32_method = "vfmadd231ps zmm";
  } else {
    p.f32_flops_per_s = best_rate(threads, seconds, 12 * 8 * 2, fma_chains_avx2);
    p.f32_method = "vfmadd231ps ymm";
  }
  return p;
}

ComputePeak measure_compute_peak(int threads, double seconds) {
  return measure_compute_peak(kernels::best_isa(), threads, seconds);
}

double compute_roofline_pct(const ComputeWork& work, double tokens_per_s, const ComputePeak& peak) {
  if (work.int8_ops < 0 || work.f32_ops < 0 || work.int8_ops + work.f32_ops <= 0 || tokens_per_s <= 0) return 0;
  if ((work.int8_ops > 0 && peak.int8_ops_per_s <= 0) || (work.f32_ops > 0 && peak.f32_flops_per_s <= 0)) return 0;
  double ideal_seconds = 0;  // per token, at the peaks
  if (work.int8_ops > 0) ideal_seconds += work.int8_ops / peak.int8_ops_per_s;
  if (work.f32_ops > 0) ideal_seconds += work.f32_ops / peak.f32_flops_per_s;
  return 100.0 * ideal_seconds * tokens_per_s;
}

DeviceSpec this_machine(int threads) {
  DeviceSpec d;
  d.id = "this";
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  d.memory_bytes = pages > 0 && page_size > 0 ? static_cast<double>(pages) * static_cast<double>(page_size) : 0.0;
  d.display = str_cat("this machine (", threads, " threads, ", format_iec(d.memory_bytes), " RAM)");
  const PeakEstimate peak = estimate_peak_flops(threads);
  const double gbs = measure_read_bandwidth_gbs(threads);
  d.peak_flops = peak.flops;
  d.bandwidth = gbs * kGB;
  d.precision = "fp32 FMA (AVX2)";
  d.source = str_cat("peak ", peak.method, "; bandwidth measured: ", threads,
                     " threads streaming-reading a 1 GiB buffer, best of 5 passes");
  return d;
}

}  // namespace ridge::plan
