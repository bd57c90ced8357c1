#include "core/part_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "core/error.h"

namespace ridge {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("ridge_part_file_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(PartFile, CommitRenamesTheWholeFileOntoItsDestination) {
  const fs::path dir = fresh_dir("commit");
  const std::string out = (dir / "out.gguf").string();
  {
    PartFile part(out);
    EXPECT_EQ(fs::path(part.path()).parent_path(), dir);  // same directory: rename is atomic
    write(part.path(), "whole");
    EXPECT_FALSE(fs::exists(out));
    part.commit();
    EXPECT_FALSE(fs::exists(part.path()));
  }
  EXPECT_EQ(read(out), "whole");
  fs::remove_all(dir);
}

TEST(PartFile, WithoutCommitNothingIsLeftAndAnOldOutputIsKept) {
  const fs::path dir = fresh_dir("abandon");
  const std::string out = (dir / "out.gguf").string();
  write(out, "previous");
  {
    PartFile part(out);
    write(part.path(), "half");
  }
  EXPECT_EQ(read(out), "previous");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  fs::remove_all(dir);
}

TEST(PartFile, TwoWritersOfOnePathNeverShareAPartFile) {
  const fs::path dir = fresh_dir("two");
  const std::string out = (dir / "out.gguf").string();
  PartFile a(out), b(out);
  EXPECT_NE(a.path(), b.path());
  write(a.path(), "a");
  write(b.path(), "b");
  a.commit();
  b.commit();  // the last rename wins, whole
  EXPECT_EQ(read(out), "b");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  fs::remove_all(dir);
}

TEST(PartFile, AFailedRenameNamesBothPaths) {
  const fs::path dir = fresh_dir("fail");
  const std::string out = (dir / "missing-dir" / "out.gguf").string();
  PartFile part(out);
  try {
    part.commit();  // nothing was written, and the directory does not exist
    FAIL() << "commit succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part.path()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(out), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ridge
