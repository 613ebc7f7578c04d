// TensorBoard event files, written without TensorFlow or a protobuf library.
//
// An events file (events.out.tfevents.<seconds>.<host>.<pid>) is a sequence of TFRecords:
//
//   uint64 length | uint32 masked CRC-32C of the length | data | uint32 masked CRC-32C of data
//
// (little-endian; masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8). Each record's data is a
// serialized tensorflow.Event message, encoded here by hand with only the fields TensorBoard
// reads for scalars:
//
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; }
//
// The first record of a file is the event whose file_version is "brain.Event:2". Readers
// (TensorBoard, its EventAccumulator, tbparse) check both CRCs and stop at a truncated last
// record, so a file cut by a killed process stays readable up to its last whole record.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace normlab {

/// CRC-32C (Castagnoli, reflected polynomial 0x82f63b78) of a buffer, chained from `crc`.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

/// TFRecord's masked CRC-32C of a buffer.
uint32_t masked_crc32c(const void* data, size_t n);

/// One TFRecord holding `data`.
std::string tfrecord_frame(const std::string& data);

/// The data of the whole records at the start of `bytes`, in order. Stops at the first record
/// that is truncated or whose CRCs do not hold; `valid_bytes` (if given) receives the length of
/// the prefix made of whole records.
std::vector<std::string> tfrecord_records(const std::string& bytes, size_t* valid_bytes = nullptr);

/// The serialized Event that opens a file (file_version "brain.Event:2").
std::string event_file_version(double wall_time);

/// One tag and its value (stored as a 32-bit float, TensorBoard's simple_value).
using Scalar = std::pair<std::string, double>;

/// The serialized Event of `scalars` at `step`.
std::string event_scalars(double wall_time, int64_t step, const std::vector<Scalar>& scalars);

/// The step field of a serialized Event (0 when absent); throws std::invalid_argument when the
/// bytes are not a well-formed message.
int64_t event_step(const std::string& event);

/// Seconds since the Unix epoch, now.
double wall_time_now();

/// Rewrites the events files of `folder` (each atomically) to hold only the events of steps
/// <= keep_up_to_step, removing the files left without any (all of them when keep_up_to_step
/// <= 0) and any truncated last record. Throws FileError naming the folder.
void events_keep_up_to(const std::string& folder, int64_t keep_up_to_step);

/// Appends scalar events to a new events file in a folder (created if missing).
///
///   EventWriter tb("runs/x/tensorboard", /*keep_up_to_step=*/resumed_step);
///   tb.scalars(step, {{"train/loss", 3.2}, {"train/lr", 1e-3}});
///
/// Construction first calls events_keep_up_to(folder, keep_up_to_step), so that a run resumed
/// from step k (whose steps after k run again) neither duplicates nor keeps stale points; then
/// it creates its own file and writes the file_version event. Every scalars() call is one write(2)
/// of whole records, so a killed process leaves readable files; nothing is buffered in the process.
/// Throws FileError naming the path when the folder or the file cannot be created or rewritten.
class EventWriter {
 public:
  EventWriter(const std::string& folder, int64_t keep_up_to_step);
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  /// Writes one event holding `scalars` (non-finite values are left out; an empty list writes
  /// nothing). Returns false when the write failed (a full disk): the caller decides whether
  /// that ends the run.
  bool scalars(int64_t step, const std::vector<Scalar>& scalars);
  /// The events file this writer appends to.
  const std::string& path() const { return path_; }

 private:
  bool append(const std::string& record);
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;  // bytes of whole records written
};

}  // namespace normlab
