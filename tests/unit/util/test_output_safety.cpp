// What a user already has in an output folder survives: StagedFiles (util/file_io.h), the writer
// of the exports, replaces only the files it writes, each whole, and check_output_folder refuses
// a path that exists and is not a folder. The commands themselves: tests/cli/output_safety.sh.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "normlab/util/file_io.h"
#include "normlab/util/output_contract.h"

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

// ---- the output contract (util/output_contract.h) ----------------------------------------------

namespace {

// The file's bytes and CRC-32, to compare before and after.
FileDigest os_digest(const fs::path& p) { return file_digest(p.string()); }

std::string os_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const FileError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(CheckOutputPath, RefusesEmptyTheInputInsideTheInputAndProtectedFolders) {
  OutputSafetyDir dir;
  const fs::path in = dir.path / "run";
  os_put(in / "config.yaml", "x");
  EXPECT_EQ(os_error([&] { check_output_path("--out", "", {}); }),
            "--out '': names no path: give the folder to write (nothing was changed)");
  EXPECT_NE(os_error([&] {
              check_output_path("--out", in.string(), {{"--checkpoint", in.string()}});
            }).find("--out " + in.string() + ": is the input (--checkpoint " + in.string() + ")"),
            std::string::npos);
  // The same folder through another spelling (a trailing separator, a link) is the same folder.
  fs::create_directory_symlink(in, dir.path / "link");
  EXPECT_NE(
      os_error([&] {
        check_output_path("--out", (dir.path / "link/").string(), {{"--checkpoint", in.string()}});
      }).find("is the input"),
      std::string::npos);
  const std::string inside = (in / "export").string();
  EXPECT_NE(os_error([&] {
              check_output_path("--out", inside, {{"--data", in.string()}});
            }).find("--out " + inside + ": lies inside the input (--data " + in.string() + ")"),
            std::string::npos);
  EXPECT_NO_THROW(check_output_path("--out", inside, {{"--checkpoint", in.string(), true}}));
  EXPECT_NO_THROW(check_output_path("--out", (dir.path / "runx").string(),
                                    {{"--checkpoint", in.string()}}));  // a name's prefix only
  // A checkpoint folder (state.json) and a token-shard folder (index.json), and inside them.
  const fs::path ckpt = in / "checkpoints/step-00000002";
  os_put(ckpt / "state.json", "{}");
  os_put(dir.path / "shards/index.json", "{}");
  // Alone, a state.json or an index.json (a web project's) protects nothing.
  EXPECT_EQ(protected_folder_kind(ckpt.string()), "");
  EXPECT_EQ(protected_folder_kind((dir.path / "shards").string()), "");
  os_put(ckpt / "model.safetensors", "weights");
  os_put(dir.path / "shards/val-00000.bin", "tokens");
  EXPECT_EQ(protected_folder_kind(ckpt.string()), "a checkpoint folder");
  EXPECT_EQ(protected_folder_kind((dir.path / "shards").string()), "a token-shard folder");
  EXPECT_EQ(protected_folder_kind(in.string()), "");
  EXPECT_EQ(protected_folder_kind((in / "checkpoints").string()), "a run's checkpoints folder");
  EXPECT_NE(os_error([&] {
              check_output_path("--out", (in / "checkpoints").string(), {});
            }).find(": is a run's checkpoints folder"),
            std::string::npos);
  EXPECT_NE(os_error([&] {
              check_output_path("--out", ckpt.string(), {});
            }).find(": is a checkpoint folder"),
            std::string::npos);
  EXPECT_NE(os_error([&] {
              check_output_path("--out", (ckpt / "x").string(), {});
            }).find(": lies inside a checkpoint folder"),
            std::string::npos);
  EXPECT_NE(os_error([&] {
              check_output_path("--out", (dir.path / "shards").string(), {});
            }).find("is a token-shard folder"),
            std::string::npos);
  // A file where a folder goes; a file is fine where a file goes.
  os_put(dir.path / "file", "mine");
  EXPECT_NE(os_error([&] {
              check_output_path("--out", (dir.path / "file").string(), {});
            }).find("exists and is a file"),
            std::string::npos);
  EXPECT_NO_THROW(check_output_path("--out", (dir.path / "file").string(), {}, false));
  EXPECT_NE(os_error([&] {
              check_output_path("--out", in.string(), {}, false);
            }).find("--out " + in.string() + ": exists and is a folder; --out names a file"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(dir.path / "runx"));  // nothing created
}

TEST(OutputFiles, RefusesAForeignFileOfAClaimedNameAndChangesNothing) {
  OutputSafetyDir dir;
  os_put(dir.path / "summary.md", "my summary\n");
  os_put(dir.path / "plots/loss.png", "mine");
  const FileDigest before = os_digest(dir.path / "summary.md");
  OutputFiles out(dir.path.string(), "sweep", false);
  const std::string e = os_error([&] { out.claim({"summary.md", "summary.csv", "plots"}); });
  EXPECT_NE(e.find(dir.path.string() + ": holds summary.md, plots (a folder), which `normlab "
                                       "sweep` writes and which are not its unchanged output of "
                                       "an earlier run"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("pass --overwrite to replace them, or choose another --out"), std::string::npos);
  EXPECT_EQ(os_digest(dir.path / "summary.md"), before);
  EXPECT_FALSE(fs::exists(dir.path / OutputFiles::kLedger));
  // --overwrite replaces a file, never a folder.
  OutputFiles over(dir.path.string(), "sweep", true);
  EXPECT_NE(os_error([&] {
              over.claim({"summary.md", "plots"});
            }).find("plots (a folder):"),
            std::string::npos);
  OutputFiles over2(dir.path.string(), "sweep", true);
  over2.claim({"summary.md"});
  EXPECT_EQ(over2.foreign(), std::vector<std::string>{"summary.md"});
  EXPECT_EQ(over2.keep_previous().size(), 1u);  // "replaced (--overwrite)", nothing set aside
  EXPECT_FALSE(fs::exists(dir.path / "summary.md.prev"));
}

TEST(OutputFiles, AnOwnUnchangedEarlierOutputIsKeptAsPrev) {
  OutputSafetyDir dir;
  const auto write = [&](const std::string& text, bool by_link) {
    OutputFiles out(dir.path.string(), "analyze", false);
    out.claim({"diagnostics.jsonl"});
    const std::vector<std::string> lines = out.keep_previous(by_link);
    write_file_atomic((dir.path / "diagnostics.jsonl").string(),
                      [&](FileWriter& w) { w.write(text); });
    out.record({"diagnostics.jsonl"});
    return lines;
  };
  EXPECT_TRUE(write("first\n", true).empty());
  const std::vector<std::string> lines = write("second\n", true);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("the output of an earlier `normlab analyze`, kept as "
                          "diagnostics.jsonl.prev"),
            std::string::npos)
      << lines[0];
  EXPECT_EQ(read_file((dir.path / "diagnostics.jsonl").string()), "second\n");
  EXPECT_EQ(read_file((dir.path / "diagnostics.jsonl.prev").string()), "first\n");
  write("third\n", false);  // one generation: the own .prev is replaced
  EXPECT_EQ(read_file((dir.path / "diagnostics.jsonl.prev").string()), "second\n");
  // Changed by hand since: no longer provably its own.
  os_put(dir.path / "diagnostics.jsonl", "edited\n");
  OutputFiles out(dir.path.string(), "analyze", false);
  EXPECT_NE(os_error([&] { out.claim({"diagnostics.jsonl"}); })
                .find((dir.path / "diagnostics.jsonl").string() +
                      ": exists and is not the unchanged output of an earlier `normlab analyze`"),
            std::string::npos);
  // Another command's output is not this one's.
  write_file_atomic((dir.path / "diagnostics.jsonl").string(),
                    [&](FileWriter& w) { w.write("x\n"); });
  OutputFiles a(dir.path.string(), "analyze", true);
  a.claim({"diagnostics.jsonl"});
  a.record({"diagnostics.jsonl"});
  OutputFiles t(dir.path.string(), "train", false);
  EXPECT_THROW(t.claim({"diagnostics.jsonl"}), FileError);
  EXPECT_EQ(read_file((dir.path / "diagnostics.jsonl").string()), "x\n");
}

// An own output edited in place since, its size kept (a digit changed in a config, a summary or
// a metrics line), is the user's: the ledger's name and size match, its digest does not. It is
// refused, byte for byte as the user left it, and nothing is set aside; --overwrite replaces it.
TEST(OutputFiles, AnEditThatKeepsTheSizeIsTheUsers) {
  OutputSafetyDir dir;
  const std::string name = "config.json";
  {
    OutputFiles out(dir.path.string(), "export", false);
    out.claim({name});
    write_file_atomic((dir.path / name).string(),
                      [&](FileWriter& w) { w.write("{\"d_model\": 64, \"lr\": 0.003}\n"); });
    out.record({name});
  }
  const std::string edited = "{\"d_model\": 64, \"lr\": 0.005}\n";
  ASSERT_EQ(edited.size(), read_file((dir.path / name).string()).size());
  os_put(dir.path / name, edited);
  const std::string ledger = read_file((dir.path / OutputFiles::kLedger).string());
  OutputFiles again(dir.path.string(), "export", false);
  EXPECT_NE(os_error([&] { again.claim({name}); })
                .find((dir.path / name).string() +
                      ": exists and is not the unchanged output of an earlier `normlab export`"),
            std::string::npos);
  EXPECT_TRUE(again.own().empty());
  EXPECT_EQ(read_file((dir.path / name).string()), edited);
  EXPECT_FALSE(fs::exists(dir.path / (name + ".prev")));
  EXPECT_EQ(read_file((dir.path / OutputFiles::kLedger).string()), ledger);
  // --overwrite replaces it (the user asked), without a .prev
  OutputFiles over(dir.path.string(), "export", true);
  over.claim({name});
  EXPECT_EQ(over.foreign(), std::vector<std::string>{name});
  over.keep_previous();
  EXPECT_FALSE(fs::exists(dir.path / (name + ".prev")));
}

TEST(OutputFiles, AForeignPrevBlocksKeepingAnOwnFile) {
  OutputSafetyDir dir;
  {
    OutputFiles out(dir.path.string(), "export", false);
    out.claim({"config.json"});
    os_put(dir.path / "config.json", "export's\n");
    out.record({"config.json"});
  }
  os_put(dir.path / "config.json.prev", "mine\n");
  OutputFiles out(dir.path.string(), "export", false);
  EXPECT_NE(
      os_error([&] { out.claim({"config.json"}); }).find("config.json.prev (where the earlier"),
      std::string::npos);
  EXPECT_EQ(read_file((dir.path / "config.json.prev").string()), "mine\n");
  EXPECT_EQ(read_file((dir.path / "config.json").string()), "export's\n");
}

TEST(OutputFiles, AForeignLedgerIsRefusedNotReplaced) {
  OutputSafetyDir dir;
  os_put(dir.path / OutputFiles::kLedger, "not json");
  OutputFiles out(dir.path.string(), "export", false);
  EXPECT_NE(os_error([&] { out.claim({"config.json"}); }).find("not a normlab output ledger"),
            std::string::npos);
  EXPECT_EQ(read_file((dir.path / OutputFiles::kLedger).string()), "not json");
}
