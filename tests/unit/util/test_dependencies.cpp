// The dependency arrangement of docs/dependencies.md, tested in one process with torch:
// spdlog (built against Debian's fmt 9) beside torch's bundled fmt 12, and SentencePiece
// (which exports its own protobuf-lite) beside libtorch_cpu (which exports protobuf symbols).
#include <gtest/gtest.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <torch/torch.h>

#include <dlfcn.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "normlab/util/error.h"
#include "normlab/util/log.h"

namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  fs::path dir =
      fs::temp_directory_path() / ("normlab_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

// libtorch.so exports a partial std::filesystem whose remove_all calls a null weak symbol;
// normlab's link options put the system libstdc++ first so that these calls bind there.
TEST(Dependencies, StdFilesystemBindsToSystemLibstdcxx) {
  using RemoveAll = std::uintmax_t (*)(const fs::path&);
  const RemoveAll fn = &fs::remove_all;
  Dl_info info{};
  ASSERT_NE(dladdr(reinterpret_cast<void*>(fn), &info), 0);
  EXPECT_NE(std::string(info.dli_fname).find("libstdc++"), std::string::npos) << info.dli_fname;

  const fs::path dir = fresh_dir("fs");
  fs::create_directories(dir / "a" / "b");
  std::ofstream(dir / "a" / "b" / "f.txt") << "x";
  EXPECT_EQ(fs::remove_all(dir), 4u);
  EXPECT_FALSE(fs::exists(dir));
}

TEST(Dependencies, SpdlogLogsBesideTorchOps) {
  const fs::path dir = fresh_dir("log");
  const fs::path file = dir / "run.log";
  {
    normlab::Logger log("test", normlab::LogLevel::Info, file.string());
    const torch::Tensor t = torch::arange(6, torch::kFloat32).reshape({2, 3});
    std::ostringstream value;
    value << t.sum().item<float>();
    log.info("sum of arange(6) = " + value.str() + " {braces kept}");
    log.debug("hidden at info level");
    log.flush();
  }
  const std::string text = read_file(file);
  EXPECT_NE(text.find("sum of arange(6) = 15 {braces kept}"), std::string::npos) << text;
  EXPECT_EQ(text.find("hidden at info level"), std::string::npos) << text;
  fs::remove_all(dir);
}

// Every line is in the file as soon as it is logged, with the logger alive and nothing flushed
// by hand: what a kill -9 leaves of a run's train.log (it held 0 bytes when lines waited in a
// buffer for a warning).
TEST(Dependencies, LogLinesAreWrittenThroughAsTheyAreLogged) {
  const fs::path dir = fresh_dir("log_through");
  const fs::path file = dir / "train.log";
  normlab::Logger log("test", normlab::LogLevel::Info, file.string());
  log.info("step 1 loss 10.25");
  EXPECT_NE(read_file(file).find("step 1 loss 10.25"), std::string::npos);
  log.info("step 2 loss 9.75");
  log.error_to_file("a backtrace line");
  const std::string text = read_file(file);
  EXPECT_NE(text.find("step 2 loss 9.75"), std::string::npos) << text;
  EXPECT_NE(text.find("a backtrace line"), std::string::npos) << text;
  fs::remove_all(dir);
}

TEST(Dependencies, LogLevelNamesAreValidated) {
  EXPECT_EQ(normlab::log_level_from_string("warn"), normlab::LogLevel::Warn);
  EXPECT_THROW(normlab::log_level_from_string("loud"), normlab::ConfigError);
}

TEST(Dependencies, SentencePieceTrainsAndEncodesBesideTorch) {
  const fs::path dir = fresh_dir("spm");
  {
    std::ofstream corpus(dir / "corpus.txt");
    for (int i = 0; i < 500; ++i)
      corpus << "In the beginning God created the heaven and the earth, verse " << i << ".\n";
  }
  const auto status = sentencepiece::SentencePieceTrainer::Train(
      "--input=" + (dir / "corpus.txt").string() + " --model_prefix=" + (dir / "m").string() +
      " --vocab_size=300 --byte_fallback=true --minloglevel=2");
  ASSERT_TRUE(status.ok()) << status.ToString();

  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.Load((dir / "m.model").string()).ok());
  std::vector<int> ids;
  ASSERT_TRUE(sp.Encode("In the beginning God created", &ids).ok());
  ASSERT_FALSE(ids.empty());

  // The ids round-trip through a torch tensor and decode back to the text.
  const torch::Tensor t = torch::tensor(std::vector<int64_t>(ids.begin(), ids.end()));
  std::vector<int> back(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
  std::string text;
  ASSERT_TRUE(sp.Decode(back, &text).ok());
  EXPECT_EQ(text, "In the beginning God created");
  fs::remove_all(dir);
}
