#include "normlab/data/loader.h"

#include "data/token_format.h"
#include "normlab/data/permutation.h"
#include "normlab/data/tokenizer.h"

#include <torch/torch.h>

#include <algorithm>

namespace normlab {
namespace {

// One (B, T + 1) buffer, sample b from fill(b, row).
template <class Fill>
Batch make_batch(int64_t n, int64_t T, Fill&& fill) {
  torch::Tensor buf = torch::empty({n, T + 1}, torch::kLong);
  int64_t* p = buf.data_ptr<int64_t>();
  for (int64_t b = 0; b < n; ++b) fill(b, p + b * (T + 1));
  return {buf.narrow(1, 0, T), buf.narrow(1, 1, T)};
}

Batch make_batch(const TokenDataset& data, const std::vector<int64_t>& ids) {
  return make_batch(static_cast<int64_t>(ids.size()), data.seq_len(), [&](int64_t b, int64_t* row) {
    data.sample(ids[static_cast<size_t>(b)], row);
  });
}

}  // namespace

void check_vocabulary(const ShardIndex& index, const std::string& dir, int64_t model_vocab_size,
                      const std::string& tokenizer_path) {
  check_shard_vocab_size(index, dir, model_vocab_size);
  if (!tokenizer_path.empty()) {
    const Tokenizer tok(tokenizer_path);
    if (tok.checksum() != index.tokenizer_crc32)
      throw ShardError(tokenizer_path + ": not the tokenizer that " + dir + " was prepared with (" +
                       index.tokenizer_file + ", crc32 " + std::to_string(index.tokenizer_crc32) +
                       ")");
  }
}

TokenDataset::TokenDataset(const std::string& dir, const std::string& split, int64_t seq_len,
                           bool verify)
    : TokenDataset(DataSource(dir, DataFormat::Shards, "", -1, 1.0, verify), split, seq_len, 0) {}

TokenDataset::TokenDataset(const DataSource& source, const std::string& split, int64_t seq_len,
                           int64_t model_vocab_size)
    : source_(source), seq_len_(seq_len) {
  if (seq_len < 1) throw DataError("data.seq_len must be positive, got " + std::to_string(seq_len));
  if (const std::string err = source_error(source); !err.empty())
    throw DataError(source.path + ": " + err);
  OpenedTokens opened = token_format(source.format).open(source, split, model_vocab_size);
  index_ = std::move(opened.index);
  documents_ = opened.documents;
  vocab_ = opened.checked_vocab;
  for (TokenArray& a : opened.arrays) add(std::move(a));
  if (!arrays_.empty()) index_.token_bytes = token_type_bytes(arrays_.front().type());
  if (total_samples_ == 0)
    throw DataError(
        opened.what + " holds " + std::to_string(num_tokens()) +
        " tokens, not enough for one sample of seq_len + 1 = " + std::to_string(seq_len_ + 1));
}

void TokenDataset::add(TokenArray array) {
  const uint64_t n = array.size();
  total_samples_ += static_cast<int64_t>(n > 0 ? (n - 1) / static_cast<uint64_t>(seq_len_) : 0);
  first_sample_.push_back(total_samples_);
  arrays_.push_back(std::move(array));
}

uint64_t TokenDataset::num_tokens() const {
  uint64_t n = 0;
  for (const auto& a : arrays_) n += a.size();
  return n;
}

std::string TokenDataset::dtype() const {
  return arrays_.empty() ? "" : token_type_name(arrays_.front().type());
}

std::vector<std::string> TokenDataset::files() const {
  std::vector<std::string> out;
  for (const auto& a : arrays_) out.push_back(a.path());
  return out;
}

void TokenDataset::sample(int64_t i, int64_t* out) const {
  TORCH_CHECK(i >= 0 && i < total_samples_, "sample ", i, " outside [0, ", total_samples_, ")");
  const auto s = static_cast<size_t>(
      std::upper_bound(first_sample_.begin(), first_sample_.end(), i) - first_sample_.begin() - 1);
  const auto j = static_cast<uint64_t>(i - first_sample_[s]);
  arrays_[s].copy(j * static_cast<uint64_t>(seq_len_), static_cast<uint64_t>(seq_len_) + 1, out,
                  vocab_);
}

TrainLoader::TrainLoader(std::shared_ptr<const TokenDataset> data, const LoaderOptions& o)
    : TrainLoader(std::vector<std::shared_ptr<const TokenDataset>>{std::move(data)}, {1.0}, o) {}

TrainLoader::TrainLoader(std::vector<std::shared_ptr<const TokenDataset>> sources,
                         const std::vector<double>& weights, const LoaderOptions& o)
    : data_(std::move(sources)),
      o_(o),
      plan_(weights, std::max<int64_t>(o.global_batch, 1), o.seed) {
  TORCH_CHECK(o.world_size >= 1 && o.rank >= 0 && o.rank < o.world_size, "loader: rank ", o.rank,
              " of ", o.world_size);
  TORCH_CHECK(o.micro_batch >= 1 && o.global_batch % (o.micro_batch * o.world_size) == 0,
              "train.global_batch (", o.global_batch, ") must be a multiple of train.micro_batch (",
              o.micro_batch, ") times the number of ranks (", o.world_size, ")");
  TORCH_CHECK(data_.size() == weights.size(), "loader: ", data_.size(), " sources, ",
              weights.size(), " weights");
  for (size_t s = 1; s < data_.size(); ++s)
    TORCH_CHECK(data_[s]->seq_len() == data_[0]->seq_len(), "loader: sources of different seq_len");
  micro_steps_ = o.global_batch / (o.micro_batch * o.world_size);
}

std::vector<SampleRef> TrainLoader::sample_refs(int64_t step, int64_t micro_step) const {
  TORCH_CHECK(step >= 0 && micro_step >= 0 && micro_step < micro_steps_, "loader: step ", step,
              ", micro-step ", micro_step, " of ", micro_steps_);
  const int64_t per_rank = o_.global_batch / o_.world_size;
  const int64_t first = step * o_.global_batch + o_.rank * per_rank + micro_step * o_.micro_batch;
  std::vector<SampleRef> refs(static_cast<size_t>(o_.micro_batch));
  for (int64_t b = 0; b < o_.micro_batch; ++b) {
    // Position first + b of the endless stream is draw k of source s; source s's draws are
    // its epochs one after another, each in the order of (its seed, epoch).
    const auto [s, k] = plan_.draw(first + b);
    const int64_t N = data_[static_cast<size_t>(s)]->num_samples();
    const int64_t epoch = k / N;
    // Source 0 keeps the seed itself: a single source orders its samples as it always has.
    const uint64_t seed =
        s == 0 ? o_.seed
               : splitmix64(o_.seed ^ splitmix64(0x736f7572636500ull + static_cast<uint64_t>(s)));
    refs[static_cast<size_t>(b)] = {
        s, permute_index(k % N, N, splitmix64(seed ^ splitmix64(static_cast<uint64_t>(epoch)))), k};
  }
  return refs;
}

std::vector<int64_t> TrainLoader::sample_ids(int64_t step, int64_t micro_step) const {
  std::vector<int64_t> ids;
  for (const SampleRef& r : sample_refs(step, micro_step)) ids.push_back(r.sample);
  return ids;
}

Batch TrainLoader::batch(int64_t step, int64_t micro_step) const {
  const std::vector<SampleRef> refs = sample_refs(step, micro_step);
  return make_batch(static_cast<int64_t>(refs.size()), data_[0]->seq_len(),
                    [&](int64_t b, int64_t* row) {
                      const SampleRef& r = refs[static_cast<size_t>(b)];
                      data_[static_cast<size_t>(r.source)]->sample(r.sample, row);
                    });
}

int64_t TrainLoader::source_epoch(int64_t s, int64_t step) const {
  return plan_.draws_before(s, step * o_.global_batch) /
         data_[static_cast<size_t>(s)]->num_samples();
}

ValLoader::ValLoader(std::shared_ptr<const TokenDataset> data, int64_t batch_size, int64_t rank,
                     int64_t world_size)
    : data_(std::move(data)), batch_size_(batch_size), rank_(rank), world_(world_size) {
  TORCH_CHECK(batch_size >= 1 && world_size >= 1 && rank >= 0 && rank < world_size,
              "val loader: batch ", batch_size, ", rank ", rank, " of ", world_size);
}

int64_t ValLoader::num_batches() const { return data_->num_samples() / (batch_size_ * world_); }

Batch ValLoader::batch(int64_t k) const {
  TORCH_CHECK(k >= 0 && k < num_batches(), "validation batch ", k, " of ", num_batches());
  std::vector<int64_t> ids(static_cast<size_t>(batch_size_));
  for (int64_t b = 0; b < batch_size_; ++b)
    ids[static_cast<size_t>(b)] = (k * world_ + rank_) * batch_size_ + b;
  return make_batch(*data_, ids);
}

}  // namespace normlab
