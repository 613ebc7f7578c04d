// What a user already has in an output folder survives: StagedFiles (util/file_io.h), the writer
// of the exports, replaces only the files it writes, each whole, and check_output_folder refuses
// a path that exists and is not a folder. The commands themselves: tests/cli/output_safety.sh.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "normlab/util/file_io.h"

using namespace normlab;
namespace fs = std::filesystem;

namespace {

// A fresh folder under the system's temporary folder, removed afterwards.
struct OutputSafetyDir {
  OutputSafetyDir() {
    path = fs::temp_directory_path() / ("normlab_output_safety_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~OutputSafetyDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  fs::path path;
};

void os_put(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

// A model repository's clone: a README, a .git folder, and an earlier config.json.
fs::path os_plant_clone(const fs::path& root) {
  const fs::path repo = root / "my-model";
  os_put(repo / "README.md", "# my model\n");
  os_put(repo / ".git/HEAD", "ref: refs/heads/main\n");
  os_put(repo / "config.json", "old\n");
  return repo;
}

void os_expect_clone_kept(const fs::path& repo) {
  EXPECT_EQ(read_file((repo / "README.md").string()), "# my model\n");
  EXPECT_EQ(read_file((repo / ".git/HEAD").string()), "ref: refs/heads/main\n");
}

// Names in `dir` that start with the staging prefix.
std::vector<std::string> os_staging_folders(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind(".normlab.tmp-", 0) == 0)
      out.push_back(e.path().filename().string());
  return out;
}

}  // namespace

TEST(StagedFiles, ReplacesOnlyTheFilesItWritesAndKeepsTheRest) {
  OutputSafetyDir dir;
  const fs::path repo = os_plant_clone(dir.path);
  {
    StagedFiles f(repo.string());
    write_file_atomic((fs::path(f.path()) / "config.json").string(),
                      [](FileWriter& w) { w.write("new\n"); });
    write_file_atomic((fs::path(f.path()) / "model.safetensors").string(),
                      [](FileWriter& w) { w.write("weights"); });
    // Until commit() the folder is as it was: the new files lie in the staging folder only.
    EXPECT_EQ(read_file((repo / "config.json").string()), "old\n");
    EXPECT_FALSE(fs::exists(repo / "model.safetensors"));
    EXPECT_EQ(f.commit(), (std::vector<std::string>{"config.json", "model.safetensors"}));
  }
  EXPECT_EQ(read_file((repo / "config.json").string()), "new\n");
  EXPECT_EQ(read_file((repo / "model.safetensors").string()), "weights");
  os_expect_clone_kept(repo);
  EXPECT_TRUE(os_staging_folders(repo).empty());
}

TEST(StagedFiles, AFailureBeforeCommitChangesNothing) {
  OutputSafetyDir dir;
  const fs::path repo = os_plant_clone(dir.path);
  try {
    StagedFiles f(repo.string());
    write_file_atomic((fs::path(f.path()) / "config.json").string(),
                      [](FileWriter& w) { w.write("new\n"); });
    throw std::runtime_error("disk full");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(read_file((repo / "config.json").string()), "old\n");
  os_expect_clone_kept(repo);
  EXPECT_TRUE(os_staging_folders(repo).empty());
  try {  // a folder it created goes again
    StagedFiles f((dir.path / "new").string());
    EXPECT_TRUE(fs::is_directory(dir.path / "new"));
    throw std::runtime_error("disk full");
  } catch (const std::runtime_error&) {
  }
  EXPECT_FALSE(fs::exists(dir.path / "new"));
}

TEST(StagedFiles, AFolderWhereAFileGoesIsRefusedBeforeAnyRename) {
  OutputSafetyDir dir;
  const fs::path repo = os_plant_clone(dir.path);
  os_put(repo / "tokenizer.model/inside", "a folder of the user's");
  StagedFiles f(repo.string());
  write_file_atomic((fs::path(f.path()) / "config.json").string(),
                    [](FileWriter& w) { w.write("new\n"); });
  write_file_atomic((fs::path(f.path()) / "tokenizer.model").string(),
                    [](FileWriter& w) { w.write("pieces"); });
  EXPECT_THROW(f.commit(), FileError);
  EXPECT_EQ(read_file((repo / "config.json").string()), "old\n");  // not even the first file
  EXPECT_EQ(read_file((repo / "tokenizer.model/inside").string()), "a folder of the user's");
}

TEST(StagedFiles, AFileAsTheFolderIsRefusedAndKept) {
  OutputSafetyDir dir;
  const fs::path file = dir.path / "out";
  os_put(file, "a file of mine");
  try {
    StagedFiles f(file.string());
    FAIL() << "a file was taken as the output folder";
  } catch (const FileError& e) {
    EXPECT_NE(std::string(e.what()).find(file.string() + ": exists and is a file"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(fs::is_regular_file(file));
  EXPECT_EQ(read_file(file.string()), "a file of mine");
  // A missing folder is created.
  StagedFiles f((dir.path / "new/export").string());
  EXPECT_EQ(f.commit(), std::vector<std::string>{});
  EXPECT_TRUE(fs::is_directory(dir.path / "new/export"));
}

TEST(StagedFiles, TheStagingOfAKilledWriterIsRemovedALiveOneKept) {
  OutputSafetyDir dir;
  const fs::path repo = os_plant_clone(dir.path);
  os_put(repo / ".normlab.tmp-4194305/.model.safetensors.tmp.4194305", "partial");  // above pid_max
  os_put(repo / ".normlab.tmp-1/config.json", "init's");  // pid 1 always exists
  StagedFiles f(repo.string());
  EXPECT_FALSE(fs::exists(repo / ".normlab.tmp-4194305"));
  EXPECT_TRUE(fs::exists(repo / ".normlab.tmp-1/config.json"));
  f.commit();
  os_expect_clone_kept(repo);
}

TEST(CheckOutputFolder, RefusesWhatIsNotAFolder) {
  OutputSafetyDir dir;
  EXPECT_NO_THROW(check_output_folder((dir.path / "missing").string()));
  EXPECT_NO_THROW(check_output_folder(dir.path.string()));
  os_put(dir.path / "file", "x");
  EXPECT_THROW(check_output_folder((dir.path / "file").string()), FileError);
  fs::create_symlink(dir.path / "nowhere", dir.path / "dangling");
  EXPECT_THROW(check_output_folder((dir.path / "dangling").string()), FileError);
  fs::create_directory_symlink(dir.path, dir.path / "link");
  EXPECT_NO_THROW(check_output_folder((dir.path / "link").string()));
}
