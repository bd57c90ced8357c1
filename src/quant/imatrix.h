// Importance matrices as llama.cpp's llama-imatrix collects them and llama-quantize uses
// them: for each layer weight matrix, the sum over the calibration tokens of each input
// channel's squared activation (in_sum2) and how many tokens were summed (counts). Column
// j's importance, in_sum2[j] / count, is the mean square of what multiplies it: how much
// its quantization error costs in the matrix's output (core/quant_weighted.h uses it).
//
//   const CalibrationSet set = calibration_windows(tok, text, 512, 100, /*skip_tokens=*/0);
//   Imatrix m = collect_imatrix(model, set, progress);
//   m.datasets = {"wiki.train.raw"};
//   write_imatrix(m, "imatrix.gguf");                     // llama-imatrix's GGUF layout
//   const Imatrix r = read_imatrix("imatrix.gguf");       // or its legacy .dat format
//   const ModelImportance imp(r, gguf::File::open("f16.gguf"));  // lengths checked
//   imp.find("blk.0.attn_q.weight")->values                // [n_mat][n_in]
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "model/model.h"
#include "quant/calibration.h"

namespace ridge::quant {

struct ImatrixEntry {
  std::vector<float> in_sum2;  // [n_mat][n_in]: n_mat > 1 for the experts of a 3-D tensor
  std::vector<float> counts;   // [n_mat] tokens summed, or one count for all matrices
};

struct Imatrix {
  std::map<std::string, ImatrixEntry> entries;  // by weight name: "blk.0.attn_q.weight"
  std::vector<std::string> datasets;            // the calibration texts
  uint32_t chunk_count = 0;                     // windows summed
  uint32_t chunk_size = 0;                      // tokens per window (0 in a legacy file)
};

// Runs the windows through the model and sums squares at the input of every layer matmul:
// q/k/v (and a fused qkv) get the same entry values, as gate/up do; the output matrix is
// not collected (llama-imatrix's default). Throws ridge::Error for a mixture-of-experts model.
Imatrix collect_imatrix(Model& model, const CalibrationSet& set,
                        const std::function<void(const std::string&)>& progress);

// Writes llama-imatrix's GGUF: general.type "imatrix", imatrix.datasets (strings),
// imatrix.chunk_count and imatrix.chunk_size (u32); per entry, in name order,
// NAME.in_sum2 (f32 [n_in], or [n_in, n_mat]) and NAME.counts (f32 [1], or [1, n_mat]).
// Writes a part file beside path (core/part_file.h) and renames it, so a failed run leaves no file.
void write_imatrix(const Imatrix& imatrix, const std::string& path);

// Reads llama-imatrix's GGUF, or its legacy binary format (which stores the mean square
// times ncall, and ncall: read as in_sum2 and a count). Throws ridge::Error naming the file
// and what is wrong: unreadable, truncated, no entries, an in_sum2 without counts (or the
// reverse), a type other than f32, counts that do not divide the sums, a negative or
// non-finite value.
Imatrix read_imatrix(const std::string& path);

// Per-column importance of each entry's matrices, [n_mat][n_in]: in_sum2 / count, or 1
// where the count is 0 (as llama-quantize).
std::vector<float> importance_of(const ImatrixEntry& entry);

// The importance of a model file's matrices. Throws ridge::Error naming the tensor when an
// entry's length is not the tensor's n_in (ne[0]) times its matrices (ne[2]).
class ModelImportance {
 public:
  struct Matrix {
    std::vector<float> values;  // [n_mat][n_in]
    int64_t n_mat = 1;
  };
  ModelImportance(const Imatrix& imatrix, const gguf::File& model);
  const Matrix* find(const std::string& tensor) const;  // null: no entry for it
  size_t size() const { return matrices_.size(); }
  // Entries that name no tensor of the model (an imatrix of another model, or of output).
  const std::vector<std::string>& unmatched() const { return unmatched_; }

 private:
  std::map<std::string, Matrix> matrices_;
  std::vector<std::string> unmatched_;
};

}  // namespace ridge::quant
