// File helpers with errors that name the file: read-only memory mapping, whole-file reads,
// atomic writes (a temporary name in the same folder, fsync, then rename), so that a reader
// never sees a half-written file and an existing file survives a failed write, and the CRC-32
// digests that checkpoints and token shards carry to detect corruption.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "normlab/util/error.h"

namespace normlab {

class OutputFiles;  // output_contract.h

/// A read-only mapping of a whole file. Empty files map to data() == nullptr, size() == 0.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const char* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const char* data_ = nullptr;
  size_t size_ = 0;
};

/// CRC-32 (zlib's polynomial) of a buffer, chained from `crc`.
uint32_t crc32_of(const void* data, size_t n, uint32_t crc = 0);

/// A file's size and the CRC-32 of its bytes.
struct FileDigest {
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
  bool operator==(const FileDigest& o) const { return bytes == o.bytes && crc32 == o.crc32; }
  bool operator!=(const FileDigest& o) const { return !(*this == o); }
};

/// The digest of a whole file (read through a mapping at about 1 GB/s).
FileDigest file_digest(const std::string& path);

/// A test-only fault (docs/reliability.md, "Fault injection"): the process kills itself with
/// SIGKILL, as `kill -9` would (no destructor, no cleanup, temporary files left as they are),
/// once `limit` bytes in total have been written through the FileWriters it is handed to. The
/// library never makes one; a program (the CLI, from NORMLAB_FAULT) owns it and passes it in.
class WriteFault {
 public:
  explicit WriteFault(uint64_t limit) : limit_(limit) {}
  /// How many of the next `n` bytes may be written before the limit (kills at the limit).
  size_t allow(size_t n);
  /// Counts `n` bytes written; kills the process when the limit is reached.
  void wrote(size_t n);

 private:
  const uint64_t limit_;
  std::atomic<uint64_t> written_{0};
};

/// Sequential writer handed to write_file_atomic's callback; every failed write throws.
class FileWriter {
 public:
  void write(const void* data, size_t n);
  void write(const std::string& s) { write(s.data(), s.size()); }
  uint64_t bytes_written() const { return digest_.bytes; }
  /// What has been written so far.
  const FileDigest& digest() const { return digest_; }

 private:
  friend FileDigest write_file_atomic(const std::string&, const std::function<void(FileWriter&)>&,
                                      WriteFault*);
  FileWriter(int fd, std::string path, WriteFault* fault)
      : fd_(fd), path_(std::move(path)), fault_(fault) {}
  int fd_;
  std::string path_;
  WriteFault* fault_;
  FileDigest digest_;
};

/// Writes `path` through `fill` into a temporary file next to it, then fsyncs and renames it
/// into place; returns the digest of what was written. On any failure (including an exception
/// from `fill`, or a full disk) the temporary file is removed, `path` is untouched, and the
/// error is rethrown as FileError naming `path`. `fault` (tests only): see WriteFault.
FileDigest write_file_atomic(const std::string& path, const std::function<void(FileWriter&)>& fill,
                             WriteFault* fault = nullptr);

/// The whole file as a string.
std::string read_file(const std::string& path);

/// fsyncs a directory so that a rename inside it is durable.
void fsync_directory(const std::string& dir);

/// A folder written whole or not at all: files go into a temporary folder next to the final
/// one, and commit() makes it durable and renames it into place, so the final path only ever
/// holds a complete folder (checkpoints and token shards write this way; exports write into a
/// folder beside what it holds, StagedFiles below):
///
///   AtomicFolder f("runs/x/export");      // creates runs/x/export.tmp-<pid>
///   safetensors_save(f.path() + "/model.safetensors", ...);
///   f.commit();                           // fsync every file and the folder; rename into place
///
/// commit() fsyncs each regular file in the folder (files copied in, too), then the folder;
/// an existing final folder is moved aside (FINAL.old-<pid>), the new one renamed into place,
/// the parent fsynced, and the old one removed. Destroyed without commit() (an exception on
/// the way), the temporary folder is removed. Throws FileError naming the path.
class AtomicFolder {
 public:
  /// `tmp_name`: the temporary folder's name beside the final one (default FINAL.tmp-<pid>;
  /// several processes writing one folder agree on a fixed name and create it once).
  explicit AtomicFolder(std::string final_path, std::string tmp_name = "", bool create = true);
  ~AtomicFolder();
  AtomicFolder(const AtomicFolder&) = delete;
  AtomicFolder& operator=(const AtomicFolder&) = delete;

  /// The temporary folder to write into.
  const std::string& path() const { return tmp_; }
  void commit();

 private:
  std::string final_, tmp_;
  bool committed_ = false;
};

/// Files written into a folder beside whatever it already holds (exports, which a user may
/// write into a git clone of a model repository): the files go into a hidden staging folder
/// inside it (FOLDER/.normlab.tmp-<pid>), and commit() fsyncs them, renames each over its final
/// name and fsyncs the folder. Files the writer does not write are never touched, and a final
/// name only ever holds a whole file, the previous one or the new one; a crash while the files
/// are written leaves the previous ones as they were and the staging folder, which the next
/// writer of the folder removes (its process is gone). The folder is created when missing; a
/// path that exists and is not a folder is a FileError naming it before anything is written.
/// Destroyed without commit() (an exception on the way), the staging folder is removed, and
/// the folder too when this writer created it and it is empty again. With `contract` (the
/// command's OutputFiles for this folder), commit() first claims the names it is about to move
/// (refusing, before any rename, a file of the user's), keeps the command's own earlier files
/// as NAME.prev, and records the new ones in the folder's ledger afterwards.
class StagedFiles {
 public:
  explicit StagedFiles(std::string folder, OutputFiles* contract = nullptr);
  ~StagedFiles();
  StagedFiles(const StagedFiles&) = delete;
  StagedFiles& operator=(const StagedFiles&) = delete;

  /// The staging folder to write into (file names only, no subfolders).
  const std::string& path() const { return tmp_; }
  /// Moves every file of path() into the folder, replacing those of the same name; returns
  /// their names, sorted. Throws FileError, before replacing any, when a name is taken by
  /// something that is not a file (a folder).
  std::vector<std::string> commit();

 private:
  std::string folder_, tmp_;
  OutputFiles* contract_;
  bool created_ = false, committed_ = false;
};

/// For the commands whose --out names a folder: throws FileError "<path>: exists and is not a
/// folder ..." when `path` exists as anything else (a regular file, a dangling link), so that
/// the command stops before any work and changes nothing. A missing path is fine.
void check_output_folder(const std::string& path);

/// Removes the FINAL.tmp-<pid> and FINAL.old-<pid> folders that writers of `final_path` left
/// when they were killed (their process is gone).
void remove_stale_siblings(const std::string& final_path);

/// An exclusive advisory lock (flock) on `path`, created if missing, held until destruction.
/// The kernel drops it when the process dies, so a killed holder never leaves it stuck.
class FileLock {
 public:
  /// Throws FileError "<path>: in use by another process (<what>)" when someone holds it.
  FileLock(const std::string& path, const std::string& what);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

  /// True when another process holds the lock on `path` now.
  static bool busy(const std::string& path);

 private:
  int fd_ = -1;
};

}  // namespace normlab
