// TensorBoard event files (util/tensorboard.h): CRC-32C against published vectors, TFRecord
// framing against bytes from TensorBoard's own Python implementation, the hand-encoded Event
// protobuf byte by byte, and the writer's files across a resume. tests/cli/tensorboard.sh reads
// a training run's files back with TensorBoard itself.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>

#include "normlab/util/file_io.h"
#include "normlab/util/tensorboard.h"
#include "support.h"

using namespace normlab;
namespace fs = std::filesystem;

namespace {

std::string bytes_of(std::initializer_list<int> v) {
  std::string s;
  for (int b : v) s.push_back(static_cast<char>(b));
  return s;
}

std::vector<std::string> events_files(const fs::path& folder) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(folder)) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<int64_t> steps_in(const std::string& file) {
  std::vector<int64_t> steps;
  for (const std::string& r : tfrecord_records(read_file(file))) steps.push_back(event_step(r));
  return steps;
}

}  // namespace

// RFC 3720 (iSCSI), appendix B.4, and the common check value of "123456789".
TEST(TensorBoardTest, Crc32cKnownVectors) {
  EXPECT_EQ(crc32c("123456789", 9), 0xe3069283u);
  const std::string zeros(32, '\0'), ones(32, '\xff');
  std::string up, down;
  for (int i = 0; i < 32; ++i) {
    up.push_back(static_cast<char>(i));
    down.push_back(static_cast<char>(31 - i));
  }
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8a9136aau);
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62a8ab43u);
  EXPECT_EQ(crc32c(up.data(), up.size()), 0x46dd794eu);
  EXPECT_EQ(crc32c(down.data(), down.size()), 0x113fdb5cu);
  EXPECT_EQ(crc32c("", 0), 0u);
  // Chained over two pieces = over the whole.
  EXPECT_EQ(crc32c(up.data() + 10, 22, crc32c(up.data(), 10)), 0x46dd794eu);
}

// Expected bytes from tensorboard.compat.tensorflow_stub.pywrap_tensorflow.masked_crc32c.
TEST(TensorBoardTest, FramingMatchesTensorBoard) {
  EXPECT_EQ(masked_crc32c("", 0), 0xa282ead8u);
  EXPECT_EQ(tfrecord_frame(""), std::string(8, '\0') + bytes_of({0x29, 0x03, 0x98, 0x07}) +
                                    bytes_of({0xd8, 0xea, 0x82, 0xa2}));
  EXPECT_EQ(tfrecord_frame("hello"), bytes_of({5, 0, 0, 0, 0, 0, 0, 0, 0xea, 0xb2, 0x04, 0x3e}) +
                                         "hello" + bytes_of({0xbb, 0x1f, 0x1c, 0x19}));
}

TEST(TensorBoardTest, RecordsStopAtTruncationOrCorruption) {
  const std::string two = tfrecord_frame("first") + tfrecord_frame("second record");
  size_t valid = 0;
  auto r = tfrecord_records(two, &valid);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0], "first");
  EXPECT_EQ(r[1], "second record");
  EXPECT_EQ(valid, two.size());
  r = tfrecord_records(two.substr(0, two.size() - 1), &valid);  // the last CRC cut
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(valid, tfrecord_frame("first").size());
  std::string bad = two;
  bad[tfrecord_frame("first").size() + 14] ^= 1;  // a data byte of the second record
  EXPECT_EQ(tfrecord_records(bad).size(), 1u);
  bad = two;
  bad[0] ^= 1;  // the first length: its CRC fails
  EXPECT_TRUE(tfrecord_records(bad).empty());
}

TEST(TensorBoardTest, EventProtobufBytes) {
  // wall_time 1.5 (field 1, fixed64), step 7 (field 2, varint), summary (field 5) holding one
  // value (field 1) with tag "a" (field 1) and simple_value 2.0f (field 2, fixed32).
  const std::string expected =
      bytes_of({0x09, 0,    0,    0,    0,    0,   0,    0xf8, 0x3f, 0x10, 0x07, 0x2a,
                0x0a, 0x0a, 0x08, 0x0a, 0x01, 'a', 0x15, 0,    0,    0,    0x40});
  EXPECT_EQ(event_scalars(1.5, 7, {{"a", 2.0}}), expected);
  EXPECT_EQ(event_step(expected), 7);
  // A step of 300 takes a two-byte varint.
  EXPECT_EQ(event_step(event_scalars(0.0, 300, {{"a", 1.0}})), 300);
  const std::string version = event_file_version(1.5);
  EXPECT_EQ(version.substr(9), bytes_of({0x1a, 13}) + "brain.Event:2");
  EXPECT_EQ(event_step(version), 0);
  EXPECT_THROW(event_step(expected.substr(0, 5)), std::invalid_argument);
}

TEST(TensorBoardTest, WriterKeepsOnlyStepsUpToTheResumePoint) {
  test::ScratchDir dir("tensorboard");
  const std::string tb = dir / "tb";
  std::string first;
  {
    EventWriter w(tb, 0);
    first = w.path();
    EXPECT_EQ(fs::path(first).filename().string().rfind("events.out.tfevents.", 0), 0u);
    for (int64_t s = 1; s <= 5; ++s) EXPECT_TRUE(w.scalars(s, {{"train/loss", 1.0 / s}}));
    EXPECT_TRUE(w.scalars(6, {{"train/loss", std::nan("")}}));  // nothing written
  }
  EXPECT_EQ(steps_in(first), (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  // A killed writer's torn last record is dropped by the next writer.
  {
    std::string bytes = read_file(first);
    write_file_atomic(first, [&](FileWriter& f) { f.write(bytes.substr(0, bytes.size() - 3)); });
  }
  std::string second;
  {
    EventWriter w(tb, 3);  // resumed from step 3
    second = w.path();
    EXPECT_NE(second, first);
    EXPECT_TRUE(w.scalars(4, {{"train/loss", 0.5}}));
  }
  EXPECT_EQ(steps_in(first), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(steps_in(second), (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(events_files(tb).size(), 2u);
  // A fresh start (or a resume before the first checkpoint) removes what was there.
  events_keep_up_to(tb, 0);
  EXPECT_TRUE(events_files(tb).empty());
}
