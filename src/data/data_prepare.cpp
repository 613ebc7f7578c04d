#include "normlab/data/data_prepare.h"

#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "normlab/data/shard.h"
#include "normlab/data/text_input.h"
#include "normlab/data/tokenizer.h"
#include "normlab/util/file_io.h"
#include "normlab/util/output_contract.h"

namespace normlab {
namespace fs = std::filesystem;

namespace {

constexpr size_t kChunkBytes = 256 * 1024;  // fixed: output must not depend on thread count

// Encodes documents; with the word cache, word by word (exactly equal to whole-document
// encoding for models that split at whitespace, see Tokenizer::splits_at_whitespace).
class DocumentEncoder {
 public:
  DocumentEncoder(const Tokenizer& tok, bool cache) : tok_(tok), cache_(cache) {}

  void encode(const std::string& doc, std::vector<int32_t>& out) {
    if (!cache_) {
      const auto ids = tok_.encode(doc);
      out.insert(out.end(), ids.begin(), ids.end());
      return;
    }
    size_t i = 0;
    const size_t n = doc.size();
    while (i < n) {
      while (i < n && is_space(doc[i])) ++i;
      size_t j = i;
      while (j < n && !is_space(doc[j])) ++j;
      if (j > i) {
        word_.assign(doc, i, j - i);
        auto it = words_.find(word_);
        if (it == words_.end()) {
          auto ids = tok_.encode(word_);
          if (words_.size() >= kMaxWords) words_.clear();  // bound memory on huge vocabularies
          it = words_.emplace(word_, std::move(ids)).first;
        }
        out.insert(out.end(), it->second.begin(), it->second.end());
      }
      i = j;
    }
  }

 private:
  static bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
  }
  static constexpr size_t kMaxWords = 1 << 20;
  const Tokenizer& tok_;
  bool cache_;
  std::string word_;
  std::unordered_map<std::string, std::vector<int32_t>> words_;
};

struct Chunk {
  std::vector<std::string> docs;
  size_t bytes = 0;
};

struct Encoded {
  std::vector<int32_t> tokens[2];  // train, val
  uint64_t documents[2] = {0, 0};
};

// A fixed pool of workers, each with its own encoder (and word cache); results are taken in
// submission order.
class EncodePool {
 public:
  EncodePool(const Tokenizer& tok, bool cache, int threads, double val_fraction)
      : eos_(tok.eos_id()), val_fraction_(val_fraction) {
    for (int t = 0; t < threads; ++t)
      workers_.emplace_back([this, &tok, cache] { run(DocumentEncoder(tok, cache)); });
  }
  ~EncodePool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
  }

  void submit(Chunk chunk) {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.emplace_back(next_submit_++, std::move(chunk));
    cv_.notify_all();
  }
  size_t in_flight() {
    std::lock_guard<std::mutex> lock(mu_);
    return next_submit_ - next_take_;
  }
  // The next result in submission order; rethrows a worker's exception.
  Encoded take() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return error_ || done_.count(next_take_); });
    if (error_) std::rethrow_exception(error_);
    Encoded e = std::move(done_.at(next_take_));
    done_.erase(next_take_++);
    return e;
  }

 private:
  void run(DocumentEncoder enc) {
    for (;;) {
      std::pair<uint64_t, Chunk> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      Encoded e;
      try {
        for (const std::string& doc : job.second.docs) {
          const int split = is_validation_document(doc, val_fraction_) ? 1 : 0;
          enc.encode(doc, e.tokens[split]);
          e.tokens[split].push_back(eos_);
          ++e.documents[split];
        }
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!error_) error_ = std::current_exception();
        cv_.notify_all();
        continue;
      }
      std::lock_guard<std::mutex> lock(mu_);
      done_.emplace(job.first, std::move(e));
      cv_.notify_all();
    }
  }

  const int32_t eos_;
  const double val_fraction_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<uint64_t, Chunk>> queue_;
  std::map<uint64_t, Encoded> done_;
  uint64_t next_submit_ = 0, next_take_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::vector<std::thread> workers_;
};

// Writes one split's token stream into shard files of at most shard_tokens tokens.
class SplitWriter {
 public:
  SplitWriter(std::string dir, std::string name, uint32_t token_bytes, uint64_t vocab,
              uint64_t shard_tokens)
      : dir_(std::move(dir)),
        name_(std::move(name)),
        token_bytes_(token_bytes),
        vocab_(vocab),
        max_(shard_tokens) {}

  void append(const std::vector<int32_t>& ids) {
    size_t at = 0;
    while (at < ids.size()) {
      if (!writer_) open();
      const size_t n = std::min<size_t>(ids.size() - at, max_ - writer_->tokens());
      writer_->append(ids.data() + at, n);
      at += n;
      if (writer_->tokens() == max_) close();
    }
  }
  SplitIndex finish(uint64_t documents) {
    close();
    index_.documents = documents;
    return index_;
  }

 private:
  void open() {
    char name[64];
    std::snprintf(name, sizeof name, "%s-%05zu.bin", name_.c_str(), index_.shards.size());
    current_ = name;
    writer_ =
        std::make_unique<ShardWriter>((fs::path(dir_) / current_).string(), token_bytes_, vocab_);
  }
  void close() {
    if (!writer_) return;
    const ShardHeader h = writer_->finish();
    index_.shards.push_back({current_, h.tokens, h.crc32});
    index_.tokens += h.tokens;
    writer_.reset();
  }

  std::string dir_, name_, current_;
  uint32_t token_bytes_;
  uint64_t vocab_, max_;
  std::unique_ptr<ShardWriter> writer_;
  SplitIndex index_;
};

// --overwrite replaces a folder that data prepare wrote: index.json and the shards. Anything
// else in it (notes, a subfolder) would go with the folder, so it is refused, naming them.
void check_only_shards(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return;
  std::vector<std::string> foreign;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool shard = (name.rfind("train-", 0) == 0 || name.rfind("val-", 0) == 0) &&
                       name.size() > 4 && name.compare(name.size() - 4, 4, ".bin") == 0;
    if (!(e.is_regular_file() && (shard || name == "index.json"))) foreign.push_back(name);
  }
  if (foreign.empty()) return;
  std::sort(foreign.begin(), foreign.end());
  std::string list;
  for (size_t i = 0; i < foreign.size() && i < 5; ++i) list += (i ? ", " : "") + foreign[i];
  if (foreign.size() > 5) list += ", ... (" + std::to_string(foreign.size()) + " in all)";
  throw InputError(dir + ": holds files that data prepare did not write (" + list +
                   "); --overwrite replaces only a folder of shards and index.json: move them "
                   "away or choose another --out (nothing was changed)");
}

}  // namespace

bool is_validation_document(const std::string& text, double val_fraction) {
  if (val_fraction <= 0.0) return false;
  uint64_t h = 1469598103934665603ull;  // FNV-1a 64
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  h ^= h >> 33;  // finalise (murmur3 fmix64) so that similar texts spread
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return static_cast<double>(h >> 11) * 0x1.0p-53 < val_fraction;
}

PrepareSummary data_prepare(const PrepareOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  {  // the output contract (util/output_contract.h), before any work
    std::vector<OutputInput> inputs = {{"--tokenizer", o.tokenizer}};
    for (const std::string& in : o.inputs)
      if (in.find_first_of("*?[") == std::string::npos) inputs.push_back({"--input", in});
    check_output_path("--out", o.out_dir, inputs, true, "a token-shard folder");
  }
  if (o.val_fraction < 0.0 || o.val_fraction >= 1.0)
    throw InputError("--val-fraction " + std::to_string(o.val_fraction) + ": must lie in [0, 1)");
  if (o.threads < 1)
    throw InputError("--threads " + std::to_string(o.threads) + ": must be at least 1");
  if (o.shard_tokens < 1) throw InputError("--shard-tokens must be at least 1");

  const Tokenizer tok(o.tokenizer);
  const std::vector<std::string> files = expand_inputs(o.inputs);
  const fs::path out(o.out_dir);
  std::error_code ec;
  if (fs::exists(out) && !fs::is_empty(out, ec) && !o.overwrite)
    throw InputError(o.out_dir + ": exists and is not empty (pass --overwrite to replace it)");
  if (o.overwrite) check_only_shards(o.out_dir);

  PrepareProgress progress;
  for (const auto& f : files) progress.bytes_total += fs::file_size(f);

  remove_stale_siblings(out.string());
  AtomicFolder folder(out.string());
  const fs::path tmp = folder.path();
  PrepareSummary summary;
  summary.word_cache = o.word_cache && tok.splits_at_whitespace();
  {
    const uint32_t token_bytes = tok.vocab_size() <= 65536 ? 2 : 4;
    SplitWriter writers[2] = {{tmp.string(), "train", token_bytes,
                               static_cast<uint64_t>(tok.vocab_size()), o.shard_tokens},
                              {tmp.string(), "val", token_bytes,
                               static_cast<uint64_t>(tok.vocab_size()), o.shard_tokens}};
    {
      EncodePool pool(tok, summary.word_cache, o.threads, o.val_fraction);
      auto drain_one = [&] {
        Encoded e = pool.take();
        for (int s = 0; s < 2; ++s) {
          writers[s].append(e.tokens[s]);
          summary.documents[s] += e.documents[s];
          summary.tokens[s] += e.tokens[s].size();
        }
        progress.documents = summary.documents[0] + summary.documents[1];
        progress.tokens = summary.tokens[0] + summary.tokens[1];
      };
      Chunk chunk;
      uint64_t done_bytes = 0;
      auto submit = [&] {
        if (chunk.docs.empty()) return;
        pool.submit(std::move(chunk));
        chunk = Chunk();
        while (pool.in_flight() > static_cast<size_t>(2 * o.threads)) drain_one();
        progress.seconds = elapsed();
        if (o.progress) o.progress(progress);
      };
      for (const auto& f : files) {
        read_documents(
            f, o.text_field,
            [&](std::string&& doc) {
              chunk.bytes += doc.size();
              chunk.docs.push_back(std::move(doc));
              if (chunk.bytes >= kChunkBytes) submit();
            },
            [&](uint64_t bytes) { progress.bytes_read = done_bytes + bytes; });
        done_bytes += fs::file_size(f);
        progress.bytes_read = done_bytes;
      }
      submit();
      while (pool.in_flight() > 0) drain_one();
    }
    if (summary.documents[0] + summary.documents[1] == 0)
      throw InputError("data prepare: the inputs hold no document (" +
                       std::to_string(files.size()) + " files, all empty)");

    ShardIndex index;
    index.token_bytes = token_bytes;
    index.vocab_size = static_cast<uint64_t>(tok.vocab_size());
    index.eos_id = tok.eos_id();
    index.tokenizer_crc32 = tok.checksum();
    index.tokenizer_file = fs::absolute(o.tokenizer).string();
    index.inputs = files;
    index.val_fraction = o.val_fraction;
    const char* names[2] = {"train", "val"};
    for (int s = 0; s < 2; ++s) {
      index.splits[names[s]] = writers[s].finish(summary.documents[s]);
      summary.shards[s] = index.splits[names[s]].shards.size();
    }
    shard_index_write(tmp.string(), index);  // last: without it the folder is not a dataset
    folder.commit();                         // an existing folder (with --overwrite) is replaced
  }
  summary.bytes = progress.bytes_total;
  summary.seconds = elapsed();
  return summary;
}

}  // namespace normlab
