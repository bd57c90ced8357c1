// An output file written under a temporary name beside its destination and renamed onto it
// only when complete, so a failed or interrupted run leaves no partial file at the
// destination. Each PartFile has its own name (PATH.part.PID.N), so two runs writing the
// same PATH at once never write into one file: each renames a whole file, and the last
// rename wins.
//
//   PartFile part(out_path);
//   writer.write(part.path());
//   part.commit();             // renames onto out_path; without it the destructor removes it
#pragma once

#include <string>

namespace ridge {

class PartFile {
 public:
  explicit PartFile(std::string final_path);
  ~PartFile();  // removes path() unless commit() succeeded
  PartFile(const PartFile&) = delete;
  PartFile& operator=(const PartFile&) = delete;

  const std::string& path() const { return part_path_; }
  const std::string& final_path() const { return final_path_; }
  // Renames path() onto final_path(); throws ridge::Error naming both if the OS refuses.
  void commit();

 private:
  std::string final_path_, part_path_;
  bool committed_ = false;
};

}  // namespace ridge
