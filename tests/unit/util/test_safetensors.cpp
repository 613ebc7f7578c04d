// safetensors: round trips, the reference layout, and malformed files rejected with a clear
// error before any large allocation.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include "normlab/util/file_io.h"
#include "normlab/util/safetensors.h"
#include "support.h"

using namespace normlab;

namespace {

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i, n >>= 8) s[i] = static_cast<char>(n & 0xff);
  return s;
}

std::string file_with(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

std::string safetensors_error_of(const std::string& bytes) {
  try {
    safetensors_parse(bytes.data(), bytes.size(), "bad.safetensors");
  } catch (const SafetensorsError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Safetensors, RoundTripsEveryDtypeShapeAndMetadata) {
  test::ScratchDir dir("st");
  TensorDict in = {
      {"f64", torch::randn({2, 3}, torch::kDouble)},
      {"f32", torch::randn({4})},
      {"bf16", torch::randn({3, 1}).to(torch::kBFloat16)},
      {"f16", torch::randn({5}).to(torch::kHalf)},
      {"i64", torch::arange(6).reshape({2, 3})},
      {"i32", torch::arange(3, torch::kInt)},
      {"u8", torch::arange(4, torch::kByte)},
      {"bool", torch::tensor({true, false})},
      {"scalar", torch::tensor(3.5)},
      {"empty", torch::zeros({0, 4})},
      {"strided", torch::randn({4, 6}).t()},
  };
  safetensors_save(dir / "a.safetensors", in, {{"format", "pt"}, {"note", "x"}});
  const SafetensorsContent out = safetensors_load(dir / "a.safetensors");
  EXPECT_EQ(out.metadata.at("format"), "pt");
  ASSERT_EQ(out.tensors.size(), in.size());
  for (const auto& [name, t] : in) {
    EXPECT_EQ(out.tensors.at(name).scalar_type(), t.scalar_type()) << name;
    EXPECT_TRUE(torch::equal(out.tensors.at(name), t)) << name;
  }
}

TEST(Safetensors, HeaderIsPaddedToEightBytesAndDataTilesTheFile) {
  test::ScratchDir dir("st");
  safetensors_save(dir / "b.safetensors",
                   {{"a", torch::ones({3}, torch::kByte)}, {"b", torch::ones({2})}});
  const std::string bytes = read_file(dir / "b.safetensors");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + n + 3 + 8);
  // Descending alignment: the 4-byte float tensor comes first in the data.
  EXPECT_NE(bytes.find("\"b\":{\"data_offsets\":[0,8]"), std::string::npos) << bytes.substr(8, n);
}

TEST(Safetensors, RejectsMalformedFilesWithClearErrors) {
  const std::string ok_entry = R"("t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::string data8(8, '\0');
  struct Case {
    const char* what;
    std::string bytes;
    const char* message;
  };
  const Case cases[] = {
      {"too short", "abc", "no 8-byte header length"},
      {"header past end", le64(1000) + "{}", "runs past the end of the file"},
      {"absurd header length", le64(1ull << 62) + "{}", "exceeds the 100 MB limit"},
      {"not json", file_with("{nope", ""), "not valid JSON"},
      {"not an object", file_with("[1,2]", ""), "does not start with '{'"},
      {"duplicate name", file_with("{" + ok_entry + "," + ok_entry + "}", data8), "appears twice"},
      {"unknown dtype",
       file_with(R"({"t":{"dtype":"F7","shape":[2],"data_offsets":[0,8]}})", data8),
       "unsupported dtype"},
      {"shape/offset mismatch",
       file_with(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data8),
       "different byte size"},
      {"absurd shape",
       file_with(R"({"t":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}})",
                 data8),
       "overflows"},
      {"negative dim",
       file_with(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data8),
       "non-negative"},
      {"offsets past end",
       file_with(R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", data8),
       "cover 16 bytes"},
      {"gap", file_with(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", data8),
       "leaving a gap"},
      {"overlap",
       file_with(
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
           data8),
       "overlapping"},
      {"end before begin",
       file_with(R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", data8),
       "end < begin"},
      {"trailing bytes", file_with("{" + ok_entry + "}", data8 + "xx"), "-byte data section"},
      {"metadata not strings", file_with(R"({"__metadata__":{"a":1}})", ""), "is not a string"},
  };
  for (const Case& c : cases) {
    const std::string err = safetensors_error_of(c.bytes);
    EXPECT_NE(err.find("bad.safetensors"), std::string::npos) << c.what << ": " << err;
    EXPECT_NE(err.find(c.message), std::string::npos) << c.what << ": got '" << err << "'";
  }
}

TEST(Safetensors, MissingFileNamesThePath) {
  try {
    safetensors_load("/nonexistent/w.safetensors");
    FAIL();
  } catch (const FileError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/w.safetensors"), std::string::npos);
  }
}

TEST(FileIo, FailedAtomicWriteKeepsThePreviousFileAndLeavesNoTemporary) {
  test::ScratchDir dir("io");
  write_file_atomic(dir / "f", [](FileWriter& w) { w.write(std::string("old")); });
  EXPECT_THROW(write_file_atomic(dir / "f",
                                 [](FileWriter& w) {
                                   w.write(std::string("new, partial"));
                                   throw std::runtime_error("interrupted");
                                 }),
               std::runtime_error);
  EXPECT_EQ(read_file(dir / "f"), "old");
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path)) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
}

// The test-only WriteFault (NORMLAB_FAULT's abort_after_bytes): a forked child writes through
// one and must die by SIGKILL with exactly `limit` bytes in the temporary file, the target
// never created, for a limit inside a write, at a write's end and before the first byte.
TEST(FileIo, WriteFaultKillsTheProcessAtTheByteLeavingOnlyThePartialTemporary) {
  for (const uint64_t limit : {9u, 6u, 0u}) {
    test::ScratchDir dir("fault");
    const std::string path = dir / "f";
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      WriteFault fault(limit);
      write_file_atomic(
          path,
          [](FileWriter& w) {
            w.write(std::string(6, 'a'));
            w.write(std::string(6, 'b'));
          },
          &fault);
      ::_exit(0);  // not reached: the fault kills the child first
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "limit " << limit << ": the child exited normally";
    EXPECT_EQ(WTERMSIG(status), SIGKILL);
    EXPECT_FALSE(std::filesystem::exists(path)) << "limit " << limit;
    const std::string tmp = dir / (".f.tmp." + std::to_string(pid));
    ASSERT_TRUE(std::filesystem::exists(tmp)) << "limit " << limit;
    EXPECT_EQ(read_file(tmp), (std::string(6, 'a') + std::string(6, 'b')).substr(0, limit));
  }
}
