// Byte units and the small parsers behind `ridge size` / `ridge roofline` arguments. Decimal
// (GB = 10^9 bytes, what GPU vendors print) and binary (GiB = 2^30 bytes, what allocators
// and nvidia-smi use) are never mixed up: every printed size says which it is.
//
//   GpuSpec g = parse_gpus("2x80GB");          // g.count 2, g.bytes_each 80e9
//   double b = parse_bytes("24GiB");            // 25769803776
//   Reserve r = parse_reserve("10%");          // r.fraction 0.1
//   format_si(141.1e9) == "141.10 GB";  format_iec(1 << 30) == "1.00 GiB"
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ridge::plan {

constexpr double kKB = 1e3, kMB = 1e6, kGB = 1e9, kTB = 1e12;
constexpr double kKiB = 1024.0, kMiB = kKiB * 1024, kGiB = kMiB * 1024, kTiB = kGiB * 1024;

// "80GB", "80 GB", "24GiB", "512MiB", "1.5TB", "4096B" (unit required, case-insensitive
// prefix letter, "iB" binary, "B" decimal). Throws ridge::Error naming `what` on bad input
// or a size <= 0.
double parse_bytes(std::string_view text, std::string_view what = "size");

struct GpuSpec {
  int count = 0;
  double bytes_each = 0.0;
  double total_bytes() const { return count * bytes_each; }
};

// "2x80GB", "8 x 24GiB", "80GB" (one GPU). Throws ridge::Error for a count < 1, a
// missing or unknown unit, or anything else it cannot read.
GpuSpec parse_gpus(std::string_view text);

// Memory held back from the KV cache (activations, CUDA context, fragmentation):
// "10%" of the total, an absolute size ("4GiB"), or "0" / "none".
struct Reserve {
  double fraction = 0.0;  // of total memory
  double bytes = 0.0;     // absolute
  double of(double total_bytes) const { return fraction * total_bytes + bytes; }
  std::string describe() const;  // "none", "10% of total", "4.00 GiB"
};
Reserve parse_reserve(std::string_view text);

std::string format_si(double bytes);        // "141.11 GB", "320.00 MB", "512 B"
std::string format_iec(double bytes);       // "131.42 GiB", "320.00 KiB", "512 B"
std::string format_both(double bytes);      // "141.11 GB (131.42 GiB)", "-1.00 GB (-953.67 MiB)"
std::string format_count(int64_t n);        // "6,738,415,616"
std::string format_fixed(double v, int decimals);  // "3.35"

}  // namespace ridge::plan
