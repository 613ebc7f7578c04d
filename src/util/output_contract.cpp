#include "normlab/util/output_contract.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <utility>

namespace normlab {
namespace fs = std::filesystem;
namespace {

constexpr const char* kNothingChanged = " (nothing was changed)";

// `p` with every link of its existing part resolved; a path that cannot be resolved as it is.
fs::path resolved(const std::string& p) {
  std::error_code ec;
  fs::path r = fs::weakly_canonical(fs::absolute(p, ec), ec);
  return ec ? fs::path(p).lexically_normal() : r;
}

// True when `inner` is `outer` or lies below it (both resolved).
bool within(const fs::path& inner, const fs::path& outer) {
  auto i = inner.begin(), o = outer.begin();
  for (; o != outer.end(); ++o, ++i) {
    if (o->empty()) continue;  // a trailing separator
    if (i == inner.end() || *i != *o) return false;
  }
  return true;
}

std::string join(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace

std::string protected_folder_kind(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return "";
  const bool state = fs::is_regular_file(fs::path(dir) / "state.json", ec);
  const bool index = fs::is_regular_file(fs::path(dir) / "index.json", ec);
  if (fs::path(dir).filename() == "checkpoints") {  // a run's: step-N folders of checkpoints
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().filename().string().rfind("step-", 0) == 0 &&
          protected_folder_kind(e.path().string()) == "a checkpoint folder")
        return "a run's checkpoints folder";
  }
  if (!state && !index) return "";
  // With the files beside it that only those writers make: model.safetensors (or a rank's
  // model.rank-*.safetensors), or train-NNNNN.bin / val-NNNNN.bin shards. A state.json or an
  // index.json alone (a web project's) protects nothing.
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool bin = name.size() > 4 && name.compare(name.size() - 4, 4, ".bin") == 0;
    if (state && name.rfind("model", 0) == 0 && e.path().extension() == ".safetensors")
      return "a checkpoint folder";
    if (index && bin && (name.rfind("train-", 0) == 0 || name.rfind("val-", 0) == 0))
      return "a token-shard folder";
  }
  return "";
}

void check_output_path(const std::string& flag, const std::string& out,
                       const std::vector<OutputInput>& inputs, bool folder,
                       const std::string& own_kind) {
  if (out.empty())
    throw FileError(flag + " '': names no path: give the " +
                    std::string(folder ? "folder" : "file") + " to write" + kNothingChanged);
  const fs::path o = resolved(out);
  for (fs::path p = o; !p.empty(); p = p.parent_path()) {
    const std::string kind = protected_folder_kind(p.string());
    if (!kind.empty() && !(p == o && kind == own_kind))
      throw FileError(flag + " " + out + ": " + (p == o ? "is " : "lies inside ") + kind + " (" +
                      p.string() +
                      "), which other runs read and no other command writes into: choose another "
                      "path" +
                      kNothingChanged);
    if (p == p.root_path()) break;
  }
  for (const OutputInput& in : inputs) {
    if (in.path.empty()) continue;
    const fs::path i = resolved(in.path);
    if (o == i)
      throw FileError(flag + " " + out + ": is the input (" + in.flag + " " + in.path +
                      "): choose another path" + kNothingChanged);
    if (!in.may_contain_out && within(o, i))
      throw FileError(flag + " " + out + ": lies inside the input (" + in.flag + " " + in.path +
                      "): choose a path outside it" + kNothingChanged);
  }
  std::error_code ec;
  if (folder)
    check_output_folder(out);
  else if (fs::is_directory(out, ec))
    throw FileError(flag + " " + out + ": exists and is a folder; " + flag +
                    " names a file: choose another path" + kNothingChanged);
}

std::string keep_as_prev(const std::string& path, bool by_link) {
  std::error_code ec;
  for (int i = 1;; ++i) {
    const std::string to = path + ".prev" + (i > 1 ? "-" + std::to_string(i) : "");
    if (fs::exists(fs::symlink_status(to, ec))) continue;
    // link() and, for a rename, a check just before it: a name taken meanwhile is not replaced
    // by link(); rename() would replace it, so the race is only with another writer of PATH.
    const int rc = by_link ? ::link(path.c_str(), to.c_str()) : ::rename(path.c_str(), to.c_str());
    if (rc == 0) return to;
    if (errno == EEXIST) continue;
    throw FileError(path + ": cannot keep it as " + to + ": " + std::strerror(errno));
  }
}

OutputFiles::OutputFiles(std::string folder, std::string command, bool overwrite, std::string flag)
    : folder_(std::move(folder)),
      command_(std::move(command)),
      flag_(std::move(flag)),
      overwrite_(overwrite) {}

std::map<std::string, OutputFiles::Entry> OutputFiles::read_ledger() const {
  std::map<std::string, Entry> ledger;
  const fs::path path = fs::path(folder_) / kLedger;
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) return ledger;
  try {
    const nlohmann::json j = nlohmann::json::parse(read_file(path.string()));
    for (const auto& [name, e] : j.at("files").items()) {
      Entry entry;
      entry.command = e.at("command").get<std::string>();
      entry.digest.bytes = e.at("bytes").get<uint64_t>();
      entry.digest.crc32 = e.at("crc32").get<uint32_t>();
      ledger[name] = entry;
    }
  } catch (const std::exception& e) {
    throw FileError(path.string() + ": not a normlab output ledger (" + e.what() +
                    "): move it away" + kNothingChanged);
  }
  return ledger;
}

bool OutputFiles::is_own(const std::map<std::string, Entry>& ledger,
                         const std::string& name) const {
  const auto it = ledger.find(name);
  if (it == ledger.end() || it->second.command != command_) return false;
  const fs::path p = fs::path(folder_) / name;
  std::error_code ec;
  if (!fs::is_regular_file(fs::symlink_status(p, ec))) return false;
  if (fs::file_size(p, ec) != it->second.digest.bytes || ec) return false;
  return file_digest(p.string()) == it->second.digest;
}

void OutputFiles::claim(const std::vector<std::string>& names) {
  const std::map<std::string, Entry> ledger = read_ledger();
  std::vector<std::string> refused, claimed, own, foreign;
  std::error_code ec;
  const auto taken = [&](const std::string& name) {
    const fs::file_status st = fs::symlink_status(fs::path(folder_) / name, ec);
    return fs::exists(st) ? (fs::is_directory(st) ? 2 : 1) : 0;
  };
  for (const std::string& name : names) {
    if (std::find(claimed_.begin(), claimed_.end(), name) != claimed_.end() ||
        std::find(claimed.begin(), claimed.end(), name) != claimed.end())
      continue;
    claimed.push_back(name);
    const int t = taken(name);
    if (t == 0) continue;
    if (t == 2) {
      refused.push_back(name + " (a folder)");
    } else if (overwrite_) {
      foreign.push_back(name);
    } else if (is_own(ledger, name)) {
      const std::string prev = name + ".prev";
      const int tp = taken(prev);
      if (tp == 2 || (tp == 1 && !is_own(ledger, prev)))
        refused.push_back(prev + " (where the earlier " + name + " would be kept)");
      else
        own.push_back(name);
    } else {
      refused.push_back(name);
    }
  }
  if (refused.empty()) {
    claimed_.insert(claimed_.end(), claimed.begin(), claimed.end());
    own_.insert(own_.end(), own.begin(), own.end());
    foreign_.insert(foreign_.end(), foreign.begin(), foreign.end());
    return;
  }
  const std::string how = "pass --overwrite to replace " +
                          std::string(refused.size() > 1 ? "them" : "it") + ", or choose another " +
                          flag_ + kNothingChanged;
  if (refused.size() == 1)
    throw FileError((fs::path(folder_) / refused[0]).string() +
                    ": exists and is not the unchanged output of an earlier `normlab " + command_ +
                    "`, which writes a file of that name: " + how);
  throw FileError(folder_ + ": holds " + join(refused) + ", which `normlab " + command_ +
                  "` writes and which are not its unchanged output of an earlier run: " + how);
}

std::vector<std::string> OutputFiles::keep_previous(bool by_link,
                                                    const std::vector<std::string>& only) {
  const auto wanted = [&](const std::string& name) {
    return std::find(done_.begin(), done_.end(), name) == done_.end() &&
           (only.empty() || std::find(only.begin(), only.end(), name) != only.end());
  };
  std::vector<std::string> lines;
  for (const std::string& name : foreign_)
    if (wanted(name)) {
      done_.push_back(name);
      lines.push_back((fs::path(folder_) / name).string() + ": replaced (--overwrite)");
    }
  for (const std::string& name : own_) {
    if (!wanted(name)) continue;
    done_.push_back(name);
    const std::string from = (fs::path(folder_) / name).string(), to = from + ".prev";
    std::error_code ec;
    fs::remove(to, ec);
    bool ok = by_link ? ::link(from.c_str(), to.c_str()) == 0 : false;
    if (by_link && !ok)  // a file system without hard links: a copy
      ok = fs::copy_file(from, to, ec) && !ec;
    if (!by_link) ok = ::rename(from.c_str(), to.c_str()) == 0;
    if (!ok)
      throw FileError(to + ": cannot keep the earlier " + name +
                      " there: " + (ec ? ec.message() : std::strerror(errno)));
    prev_.push_back(name + ".prev");
    lines.push_back(from + ": the output of an earlier `normlab " + command_ + "`, kept as " +
                    name + ".prev");
  }
  if (!lines.empty()) fsync_directory(folder_);
  notes_.insert(notes_.end(), lines.begin(), lines.end());
  return lines;
}

void OutputFiles::record(const std::vector<std::string>& names) {
  std::map<std::string, Entry> ledger = read_ledger();
  std::error_code ec;
  for (auto it = ledger.begin(); it != ledger.end();)  // entries of files that are gone
    it = fs::exists(fs::path(folder_) / it->first, ec) ? std::next(it) : ledger.erase(it);
  std::vector<std::string> all = names;
  all.insert(all.end(), prev_.begin(), prev_.end());
  for (const std::string& name : all) {
    const fs::path p = fs::path(folder_) / name;
    if (!fs::is_regular_file(fs::symlink_status(p, ec))) continue;
    ledger[name] = Entry{command_, file_digest(p.string())};
  }
  nlohmann::json files = nlohmann::json::object();
  for (const auto& [name, e] : ledger)
    files[name] = {{"command", e.command}, {"bytes", e.digest.bytes}, {"crc32", e.digest.crc32}};
  const nlohmann::json j = {{"files", files}};
  write_file_atomic((fs::path(folder_) / kLedger).string(),
                    [&](FileWriter& w) { w.write(j.dump(1) + "\n"); });
}

}  // namespace normlab
