// libFuzzer target for the GGUF reader: any input must either parse or throw ridge::Error;
// anything else (a crash, a sanitizer report, std::bad_alloc from a hostile count, a
// tensor view outside the input) is a bug. Accepted inputs also go through the writer:
// write(parse(x)) must be a fixed point of parse-then-write.
//
//   scripts/fuzz-gguf 120        # builds build-fuzz/ with clang and runs for 120 s
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/error.h"
#include "gguf/gguf.h"
#include "gguf/writer.h"

namespace {

using ridge::gguf::File;

// Reads every byte a caller could reach: tensor views must lie inside the input.
uint32_t touch(const File& f) {
  uint32_t sum = 0;
  for (const ridge::gguf::KeyValue& kv : f.metadata()) sum += kv.value.to_string(4).size();
  for (const ridge::gguf::TensorInfo& t : f.tensors()) {
    if (f.find_tensor(t.name) != &t) __builtin_trap();
    if (t.nbytes > 0) sum += t.data[0] + t.data[t.nbytes - 1];
  }
  return sum;
}

std::vector<uint8_t> rewrite(const File& f) {
  ridge::gguf::Writer w(f.alignment());
  for (const ridge::gguf::KeyValue& kv : f.metadata()) w.set(kv.key, kv.value);
  for (const ridge::gguf::TensorInfo& t : f.tensors())
    w.add_tensor(t.name, t.dtype, std::vector<int64_t>(t.ne, t.ne + t.n_dims), {t.data, t.nbytes});
  return w.to_bytes();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    File f = File::parse(std::span<const uint8_t>(data, size), "fuzz");
    volatile uint32_t sink = touch(f);
    (void)sink;
    // A legal but huge general.alignment (2^28) makes the writer pad the header and
    // the data to it: hundreds of MB per input, past the fuzzer's RSS limit. The reader
    // has handled the input by now; the round trip is checked for sane alignments.
    if (f.alignment() > (1u << 16)) return 0;
    std::vector<uint8_t> once;
    try {
      once = rewrite(f);
    } catch (const ridge::Error&) {
      return 0;  // the writer is stricter (no 0-d tensors); not a reader bug
    }
    File again = File::parse(once, "rewritten");
    if (rewrite(again) != once) __builtin_trap();
  } catch (const ridge::Error&) {
  }
  return 0;
}
