#include "plan/units.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace ridge::plan {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

// Parses a leading non-negative decimal number; returns how many characters it used (0: none).
size_t parse_number(std::string_view s, double& value) {
  size_t n = 0;
  while (n < s.size() && (std::isdigit(static_cast<unsigned char>(s[n])) || s[n] == '.')) ++n;
  if (n == 0) return 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + n, value);
  if (ec != std::errc() || end != s.data() + n) return 0;
  return n;
}

std::string scaled(double bytes, const char* const* units, double base) {
  int u = 0;
  double v = bytes;
  while (std::fabs(v) >= base && u < 4) {
    v /= base;
    ++u;
  }
  char buf[48];
  if (u == 0) std::snprintf(buf, sizeof buf, "%.0f B", v);
  else std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

}  // namespace

double parse_bytes(std::string_view text, std::string_view what) {
  std::string_view s = trim(text);
  double value = 0.0;
  size_t used = parse_number(s, value);
  if (used == 0)
    throw Error(str_cat(what, " '", text, "': expected a number and a unit, e.g. 80GB or 24GiB"));
  std::string_view unit = trim(s.substr(used));
  struct Unit {
    std::string_view name;
    double bytes;
  };
  static constexpr Unit kUnits[] = {{"B", 1},      {"KB", kKB},   {"MB", kMB},   {"GB", kGB},
                                    {"TB", kTB},   {"KiB", kKiB}, {"MiB", kMiB}, {"GiB", kGiB},
                                    {"TiB", kTiB}};
  for (const Unit& u : kUnits) {
    if (!iequals(unit, u.name)) continue;
    // "gib" and "GB" both read case-insensitively, but "Gb" (bits) is not what anyone means
    // for memory, so no bit units exist.
    double bytes = value * u.bytes;
    if (!(bytes > 0))
      throw Error(str_cat(what, " '", text, "' must be greater than zero"));
    return bytes;
  }
  throw Error(str_cat(what, " '", text, "': unknown unit '", unit,
                      "' (use B, KB, MB, GB, TB = powers of 1000, or KiB, MiB, GiB, TiB = powers of 1024)"));
}

GpuSpec parse_gpus(std::string_view text) {
  std::string_view s = trim(text);
  GpuSpec g;
  size_t x = s.find_first_of("xX*");
  std::string_view size = s;
  if (x != std::string_view::npos) {
    std::string_view count = trim(s.substr(0, x));
    long long n = -1;
    auto [end, ec] = std::from_chars(count.data(), count.data() + count.size(), n);
    if (ec != std::errc() || end != count.data() + count.size() || count.empty())
      throw Error(str_cat("--gpus '", text, "': expected COUNTxSIZE, e.g. 2x80GB"));
    if (n < 1 || n > 1'000'000)
      throw Error(str_cat("--gpus '", text, "': GPU count must be at least 1, got ", n));
    g.count = static_cast<int>(n);
    size = s.substr(x + 1);
  } else {
    g.count = 1;
  }
  g.bytes_each = parse_bytes(size, str_cat("--gpus '", text, "': memory per GPU"));
  return g;
}

Reserve parse_reserve(std::string_view text) {
  std::string_view s = trim(text);
  Reserve r;
  if (s.empty() || s == "0" || iequals(s, "none")) return r;
  if (s.back() == '%') {
    double pct = 0.0;
    std::string_view num = trim(s.substr(0, s.size() - 1));
    if (parse_number(num, pct) != num.size() || num.empty() || !(pct >= 0 && pct < 100))
      throw Error(str_cat("--reserve '", text, "': a percentage must be in [0, 100)"));
    r.fraction = pct / 100.0;
    return r;
  }
  r.bytes = parse_bytes(s, "--reserve");
  return r;
}

std::string Reserve::describe() const {
  if (fraction == 0.0 && bytes == 0.0) return "none";
  std::string out;
  if (fraction > 0) out = str_cat(format_fixed(fraction * 100, fraction * 100 == std::floor(fraction * 100) ? 0 : 1), "% of total");
  if (bytes > 0) out += (out.empty() ? "" : " + ") + format_both(bytes);
  return out;
}

std::string format_si(double bytes) {
  static const char* const units[] = {"B", "KB", "MB", "GB", "TB"};
  return scaled(bytes, units, 1000.0);
}

std::string format_iec(double bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  return scaled(bytes, units, 1024.0);
}

std::string format_both(double bytes) {
  if (bytes < 0) return str_cat("-", format_si(-bytes), " (-", format_iec(-bytes), ")");
  return str_cat(format_si(bytes), " (", format_iec(bytes), ")");
}

std::string format_count(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

std::string format_fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

}  // namespace ridge::plan
