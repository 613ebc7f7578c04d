#include "normlab/data/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <zlib.h>

#include <filesystem>
#include <random>
#include <sstream>
#include <unordered_map>

#include "data/hf_tokenizer.h"
#include "data/sentencepiece_tokenizer.h"
#include "normlab/data/shard.h"
#include "normlab/data/text_input.h"
#include "normlab/util/file_io.h"
#include "normlab/util/output_contract.h"

namespace normlab {
namespace {

// Training sentences: the lines of every document, reservoir-sampled to at most `limit`.
class LinesIterator : public sentencepiece::SentenceIterator {
 public:
  explicit LinesIterator(std::vector<std::string> lines) : lines_(std::move(lines)) {}
  bool done() const override { return i_ >= lines_.size(); }
  void Next() override { ++i_; }
  const std::string& value() const override { return lines_[i_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  std::vector<std::string> lines_;
  size_t i_ = 0;
};

}  // namespace

// The file's kind (tokenizer_backend.h), and what every kind shares.
struct Tokenizer::Impl {
  std::unique_ptr<TokenizerBackend> model;
  std::string path;
  uint32_t crc = 0;
};

namespace {

// A tokenizer.json by its name, or by its first character (JSON, where a SentencePiece model
// is a protobuf, whose first byte is a field key, never '{').
bool looks_like_tokenizer_json(const std::string& path, const std::string& bytes) {
  if (std::filesystem::path(path).extension() == ".json") return true;
  const size_t first = bytes.find_first_not_of(" \t\r\n");
  return first != std::string::npos && bytes[first] == '{';
}

}  // namespace

Tokenizer::Tokenizer(const std::string& model_path) : impl_(new Impl) {
  impl_->path = model_path;
  const std::string bytes = read_file(model_path);
  impl_->crc = static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(bytes.size())));
  if (looks_like_tokenizer_json(model_path, bytes))
    impl_->model = std::make_unique<hf::HfTokenizer>(model_path, bytes);
  else
    impl_->model = make_sentencepiece_tokenizer(model_path, bytes);
}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  // Both models refuse what is not UTF-8 alike (SentencePiece would encode each bad byte as
  // U+FFFD, the unknown piece, silently): as `data prepare` refuses it in a document.
  if (const size_t bad = utf8_error_offset(text); bad != std::string::npos)
    throw InputError("cannot encode text that is not valid UTF-8 (byte " + std::to_string(bad) +
                     ")");
  return impl_->model->encode(text);
}
std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  return impl_->model->decode(ids);
}
std::string Tokenizer::piece(int32_t id) const { return impl_->model->piece(id); }
int64_t Tokenizer::vocab_size() const { return impl_->model->vocab_size(); }
int32_t Tokenizer::eos_id() const { return impl_->model->eos_id(); }
int32_t Tokenizer::bos_id() const { return impl_->model->bos_id(); }
std::vector<int32_t> Tokenizer::token_byte_lengths() const {
  return impl_->model->token_byte_lengths();
}
uint32_t Tokenizer::checksum() const { return impl_->crc; }
const std::string& Tokenizer::path() const { return impl_->path; }
bool Tokenizer::splits_at_whitespace() const { return impl_->model->splits_at_whitespace(); }
bool Tokenizer::is_tokenizer_json() const { return impl_->model->is_tokenizer_json(); }

namespace {

// SentencePiece's error, or for a vocabulary smaller than its pieces that cannot be merged away
// ("Vocabulary size is smaller than required_chars. V vs N"), what that minimum N is made of.
std::string train_error(const std::string& what, const TokenizerTrainOptions& o) {
  const size_t at = what.find("smaller than required_chars");
  const size_t vs = what.find(" vs ", at);
  if (at == std::string::npos || vs == std::string::npos) return "tokenizer train: " + what;
  const long long need = std::atoll(what.c_str() + vs + 4);
  if (need <= 0) return "tokenizer train: " + what;
  std::ostringstream coverage;
  coverage << o.character_coverage;
  return "--vocab-size " + std::to_string(o.vocab_size) +
         ": too small for this text with byte fallback: at least " + std::to_string(need) +
         " (3 special pieces, 256 byte pieces and one piece for each of the " +
         std::to_string(need - 259) +
         " characters that cover the text, word boundary included, at character coverage " +
         coverage.str() + ")";
}

// A tokenizer that token shards were prepared with (an index.json in the folder or in a folder
// inside it names it) is never replaced: the shards' ids are its pieces.
void check_not_in_use(const std::string& out_dir) {
  namespace fs = std::filesystem;
  const fs::path model = fs::path(out_dir) / "tokenizer.model";
  std::error_code ec;
  if (!fs::exists(model, ec)) return;
  std::vector<fs::path> folders = {fs::path(out_dir)};
  for (const auto& e : fs::directory_iterator(out_dir, ec))
    if (e.is_directory(ec)) folders.push_back(e.path());
  for (const fs::path& dir : folders) {
    if (!fs::is_regular_file(dir / "index.json", ec)) continue;
    std::string used;
    try {
      used = shard_index_read(dir.string()).tokenizer_file;
    } catch (const std::exception&) {
      continue;  // not an index of ours: it names no tokenizer
    }
    if (!used.empty() && fs::equivalent(used, model, ec))
      throw TokenizerError("--out " + out_dir + ": " + model.string() +
                           " is the tokenizer the shards of " + dir.string() +
                           " were prepared with (their index.json names it); a new one would not "
                           "match them: choose another --out (nothing was changed)");
  }
}

}  // namespace

std::string tokenizer_train(const TokenizerTrainOptions& o) {
  if (o.vocab_size < kMinVocabSize)
    throw TokenizerError("--vocab-size " + std::to_string(o.vocab_size) +
                         ": too small for byte fallback: at least " +
                         std::to_string(kMinVocabSize) +
                         " (3 special pieces, 256 byte pieces and one piece for each character "
                         "of the text, the word boundary included: 259 + the characters)");
  check_output_path("--out", o.out_dir, {});  // before any work (util/output_contract.h)
  check_not_in_use(o.out_dir);
  const std::vector<std::string> files = expand_inputs(o.inputs);

  // Reservoir sample of the input lines (deterministic for a seed).
  std::vector<std::string> lines;
  std::mt19937_64 rng(o.seed);
  uint64_t seen = 0;
  for (const std::string& f : files) {
    read_documents(f, o.text_field, [&](std::string&& doc) {
      std::istringstream in(doc);
      for (std::string line; std::getline(in, line);) {
        if (line.empty()) continue;
        ++seen;
        if (o.max_sentences <= 0 || lines.size() < static_cast<size_t>(o.max_sentences)) {
          lines.push_back(std::move(line));
        } else {
          const uint64_t j = rng() % seen;
          if (j < lines.size()) lines[j] = std::move(line);
        }
      }
    });
  }
  if (lines.empty()) throw TokenizerError("tokenizer train: the inputs hold no text");

  const std::unordered_map<std::string, std::string> args = {
      {"model_type", o.model == TokenizerModel::Bpe ? "bpe" : "unigram"},
      {"vocab_size", std::to_string(o.vocab_size)},
      {"byte_fallback", "true"},
      {"character_coverage", std::to_string(o.character_coverage)},
      {"num_threads", std::to_string(std::max(1, o.threads))},
      {"input_sentence_size", "0"},  // already sampled above
      {"max_sentence_length", "16384"},
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"pad_id", "-1"},
      {"hard_vocab_limit", "false"},
      {"minloglevel", "1"},  // warnings and errors only
  };
  sentencepiece::SetRandomGeneratorSeed(static_cast<unsigned>(o.seed));
  LinesIterator it(std::move(lines));
  std::string model;
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, &it, &model);
  if (!status.ok()) throw TokenizerError(train_error(status.ToString(), o));

  std::filesystem::create_directories(o.out_dir);
  if (o.contract) o.contract->keep_previous();  // both files are replaced by a rename
  const std::string model_path = (std::filesystem::path(o.out_dir) / "tokenizer.model").string();
  write_file_atomic(model_path, [&](FileWriter& w) { w.write(model); });
  std::string vocab;
  sentencepiece::SentencePieceProcessor sp;
  if (!sp.LoadFromSerializedProto(model).ok())
    throw TokenizerError(model_path + ": the trained model does not load");
  for (int i = 0; i < sp.GetPieceSize(); ++i) {
    std::ostringstream row;
    row << sp.IdToPiece(i) << '\t' << sp.GetScore(i) << '\n';
    vocab += row.str();
  }
  write_file_atomic((std::filesystem::path(o.out_dir) / "tokenizer.vocab").string(),
                    [&](FileWriter& w) { w.write(vocab); });
  if (o.contract) o.contract->record({"tokenizer.model", "tokenizer.vocab"});
  return model_path;
}

}  // namespace normlab
