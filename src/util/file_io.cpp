#include "normlab/util/file_io.h"

#include "normlab/util/output_contract.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

namespace normlab {
namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what, int err) {
  throw FileError(path + ": " + what + ": " + std::strerror(err));
}

}  // namespace

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, "cannot open", errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail(path, "cannot stat", err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw FileError(path + ": not a regular file");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      fail(path, "cannot map", err);
    }
    data_ = static_cast<const char*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<char*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : path_(std::move(o.path_)),
      data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    if (data_) ::munmap(const_cast<char*>(data_), size_);
    path_ = std::move(o.path_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

uint32_t crc32_of(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const Bytef*>(data);
  while (n > 0) {  // zlib takes uInt lengths
    const uInt chunk = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    crc = static_cast<uint32_t>(::crc32(crc, p, chunk));
    p += chunk;
    n -= chunk;
  }
  return crc;
}

FileDigest file_digest(const std::string& path) {
  MappedFile f(path);
  return {f.size(), crc32_of(f.data(), f.size())};
}

namespace {

[[noreturn]] void kill_self() {
  ::kill(::getpid(), SIGKILL);
  for (;;) ::pause();  // SIGKILL is delivered before kill() returns to this thread
}

}  // namespace

size_t WriteFault::allow(size_t n) {
  const uint64_t done = written_.load();
  if (done >= limit_) kill_self();
  return static_cast<size_t>(std::min<uint64_t>(n, limit_ - done));
}

void WriteFault::wrote(size_t n) {
  if (written_.fetch_add(n) + n >= limit_) kill_self();
}

void FileWriter::write(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, fault_ ? fault_->allow(n) : n);
    if (w < 0) {
      if (errno == EINTR) continue;
      fail(path_, "write failed after " + std::to_string(digest_.bytes) + " bytes", errno);
    }
    digest_.crc32 = crc32_of(p, static_cast<size_t>(w), digest_.crc32);
    p += w;
    n -= static_cast<size_t>(w);
    digest_.bytes += static_cast<uint64_t>(w);
    if (fault_) fault_->wrote(static_cast<size_t>(w));
  }
}

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail(dir, "cannot open directory", errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) fail(dir, "fsync failed", err);
}

FileDigest write_file_atomic(const std::string& path, const std::function<void(FileWriter&)>& fill,
                             WriteFault* fault) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const std::string tmp = (target.parent_path() / ("." + target.filename().string() + ".tmp." +
                                                   std::to_string(::getpid())))
                              .string();
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(path, "cannot create temporary file " + tmp, errno);
  bool open = true;
  FileDigest digest;
  try {
    FileWriter writer(fd, path, fault);
    fill(writer);
    digest = writer.digest();
    if (::fsync(fd) != 0) fail(path, "fsync failed", errno);
    open = false;
    if (::close(fd) != 0) fail(path, "close failed", errno);
  } catch (...) {
    if (open) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail(path, "cannot rename " + tmp + " into place", err);
  }
  fsync_directory(target.parent_path().string());
  return digest;
}

namespace {

// Whether `pid` (decimal digits, as in a temporary name) names a process that is gone.
bool process_gone(const std::string& pid) {
  if (pid.empty() || pid.size() > 9 || pid.find_first_not_of("0123456789") != std::string::npos)
    return false;
  return ::kill(static_cast<pid_t>(std::stol(pid)), 0) != 0 && errno == ESRCH;
}

void fsync_file(const std::string& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(file, "cannot open to fsync", errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) fail(file, "fsync failed", err);
}

constexpr const char* kStagingPrefix = ".normlab.tmp-";

}  // namespace

AtomicFolder::AtomicFolder(std::string final_path, std::string tmp_name, bool create)
    : final_(std::move(final_path)) {
  namespace fs = std::filesystem;
  const fs::path f(final_);
  const std::string name =
      tmp_name.empty() ? f.filename().string() + ".tmp-" + std::to_string(::getpid()) : tmp_name;
  tmp_ = (f.has_parent_path() ? f.parent_path() / name : fs::path(name)).string();
  if (!create) {
    committed_ = true;  // another process owns the folder: never remove it from here
    return;
  }
  std::error_code ec;
  fs::remove_all(tmp_, ec);
  fs::create_directories(tmp_, ec);
  if (ec) fail(tmp_, "cannot create folder", ec.value());
}

AtomicFolder::~AtomicFolder() {
  if (committed_) return;
  std::error_code ec;
  std::filesystem::remove_all(tmp_, ec);
}

void AtomicFolder::commit() {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(tmp_, ec)) {
    if (e.is_regular_file()) fsync_file(e.path().string());
  }
  if (ec) fail(tmp_, "cannot list folder", ec.value());
  fsync_directory(tmp_);
  const fs::path f(final_);
  const std::string old = final_ + ".old-" + std::to_string(::getpid());
  const bool had_old = fs::exists(f, ec);
  if (had_old && ::rename(final_.c_str(), old.c_str()) != 0)
    fail(final_, "cannot move the previous folder aside to " + old, errno);
  if (::rename(tmp_.c_str(), final_.c_str()) != 0) {
    const int err = errno;
    if (had_old) ::rename(old.c_str(), final_.c_str());  // put the previous one back
    fail(final_, "cannot rename " + tmp_ + " into place", err);
  }
  committed_ = true;
  fsync_directory(f.has_parent_path() ? f.parent_path().string() : ".");
  if (had_old) fs::remove_all(old, ec);
}

void check_output_folder(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status link = fs::symlink_status(path, ec);
  if (ec || !fs::exists(link)) return;  // missing: the command creates it
  if (fs::is_directory(fs::status(path, ec))) return;
  const char* what = fs::is_regular_file(link) ? "a file"
                     : fs::is_symlink(link)    ? "a dangling link"
                                               : "not a folder";
  throw FileError(path + ": exists and is " + what +
                  "; --out names a folder: choose another path (nothing was changed)");
}

StagedFiles::StagedFiles(std::string folder, OutputFiles* contract)
    : folder_(std::move(folder)), contract_(contract) {
  namespace fs = std::filesystem;
  if (folder_.empty()) folder_ = ".";
  check_output_folder(folder_);
  std::error_code ec;
  created_ = fs::create_directories(folder_, ec);
  if (ec) fail(folder_, "cannot create folder", ec.value());
  for (const auto& e : fs::directory_iterator(folder_, ec)) {  // staging of killed writers
    const std::string name = e.path().filename().string();
    if (name.rfind(kStagingPrefix, 0) == 0 &&
        process_gone(name.substr(std::string(kStagingPrefix).size())))
      fs::remove_all(e.path(), ec);
  }
  tmp_ = (fs::path(folder_) / (kStagingPrefix + std::to_string(::getpid()))).string();
  fs::remove_all(tmp_, ec);
  if (!fs::create_directory(tmp_, ec) || ec)
    fail(tmp_, "cannot create folder", ec ? ec.value() : EEXIST);
}

StagedFiles::~StagedFiles() {
  if (committed_) return;
  std::error_code ec;
  std::filesystem::remove_all(tmp_, ec);
  if (created_) std::filesystem::remove(folder_, ec);  // only if still empty
}

std::vector<std::string> StagedFiles::commit() {
  namespace fs = std::filesystem;
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(tmp_, ec))
    if (e.is_regular_file()) names.push_back(e.path().filename().string());
  if (ec) fail(tmp_, "cannot list folder", ec.value());
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    fsync_file((fs::path(tmp_) / name).string());
    const fs::path target = fs::path(folder_) / name;
    const fs::file_status st = fs::symlink_status(target, ec);
    if (fs::exists(st) && fs::is_directory(st))
      throw FileError(target.string() + ": is a folder, not replaced by a file (nothing of " +
                      folder_ + " was changed)");
  }
  if (contract_) {
    contract_->claim(names);  // a file of the user's: refused before any rename
    contract_->keep_previous(/*by_link=*/true, names);
  }
  for (const std::string& name : names) {
    const std::string from = (fs::path(tmp_) / name).string();
    const std::string to = (fs::path(folder_) / name).string();
    if (::rename(from.c_str(), to.c_str()) != 0)
      fail(to, "cannot rename " + from + " into place", errno);
  }
  fsync_directory(folder_);
  committed_ = true;
  fs::remove_all(tmp_, ec);
  if (contract_) contract_->record(names);
  return names;
}

void remove_stale_siblings(const std::string& final_path) {
  namespace fs = std::filesystem;
  const fs::path out(final_path);
  const fs::path parent = out.has_parent_path() ? out.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(parent, ec)) return;
  const std::string base = out.filename().string();
  for (const auto& e : fs::directory_iterator(parent, ec)) {
    const std::string name = e.path().filename().string();
    for (const char* tag : {".tmp-", ".old-"}) {
      const std::string prefix = base + tag;
      if (name.rfind(prefix, 0) != 0) continue;
      if (process_gone(name.substr(prefix.size()))) fs::remove_all(e.path(), ec);
    }
  }
}

std::string read_file(const std::string& path) {
  MappedFile f(path);
  return std::string(f.data() ? f.data() : "", f.size());
}

FileLock::FileLock(const std::string& path, const std::string& what) {
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw FileError(path + ": cannot open lock file: " + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK) throw FileError(path + ": in use by another process (" + what + ")");
    throw FileError(path + ": cannot lock: " + std::strerror(err));
  }
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
}

bool FileLock::busy(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;  // no lock file: nobody holds it
  const bool held = ::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);
  return held;
}

}  // namespace normlab
