// normlab data prepare | inspect
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include "command.h"
#include "eval_data.h"
#include "normlab/data/data_prepare.h"
#include "normlab/data/loader.h"
#include "normlab/data/shard.h"
#include "normlab/data/tokenizer.h"

namespace normlab::cli {
namespace {

// A progress bar on a terminal; a line per 10 % otherwise.
void show_progress(const PrepareProgress& p, int& last_decile) {
  const double frac =
      p.bytes_total ? static_cast<double>(p.bytes_read) / static_cast<double>(p.bytes_total) : 1.0;
  const double mbps = p.seconds > 0 ? static_cast<double>(p.bytes_read) / 1e6 / p.seconds : 0.0;
  if (::isatty(STDERR_FILENO)) {
    const int width = 30, filled = static_cast<int>(frac * width);
    std::fprintf(stderr, "\r[%.*s%*s] %5.1f%%  %.1f/%.1f MB  %.1f MB/s  %llu docs  %llu tokens",
                 filled, "==============================", width - filled, "", 100 * frac,
                 static_cast<double>(p.bytes_read) / 1e6, static_cast<double>(p.bytes_total) / 1e6,
                 mbps, static_cast<unsigned long long>(p.documents),
                 static_cast<unsigned long long>(p.tokens));
  } else if (static_cast<int>(frac * 10) > last_decile) {
    last_decile = static_cast<int>(frac * 10);
    std::fprintf(stderr, "prepare: %3.0f%%  %.1f MB/s  %llu tokens\n", 100 * frac, mbps,
                 static_cast<unsigned long long>(p.tokens));
  }
}

// A token array or Megatron dataset: its files, dtype and counts, every id checked against the
// vocabulary, and the first sample decoded when a tokenizer is given.
int inspect_source(const DataSource& source, int64_t seq_len, int64_t vocab,
                   const std::string& tokenizer) {
  std::unique_ptr<Tokenizer> tok;
  if (!tokenizer.empty()) tok = std::make_unique<Tokenizer>(tokenizer);
  if (vocab <= 0 && tok) vocab = tok->vocab_size();
  if (vocab <= 0)  // the dtype's whole range (a .npy's dtype is in its header: any int32 id)
    vocab = source.dtype == "uint16" ? 65536 : int64_t{1} << 31;
  const TokenDataset data(source, "train", seq_len, vocab);
  const auto files = data.files();
  std::cout << source.path << ": " << enum_name(source.format) << ", " << data.dtype() << " ids, "
            << files.size() << (files.size() == 1 ? " file" : " files") << " (" << files.front()
            << (files.size() > 1 ? " ..." : "") << ")\n";
  std::cout << "  " << data.num_tokens() << " tokens, "
            << (data.documents() >= 0 ? std::to_string(data.documents()) : "unknown")
            << " documents, " << data.num_samples() << " samples of " << seq_len
            << " (every id below " << vocab << ")\n";
  if (tok) {
    std::vector<int64_t> s(static_cast<size_t>(seq_len + 1));
    data.sample(0, s.data());
    s.resize(std::min<size_t>(s.size(), 33));
    std::cout << "  first sample: " << tok->decode(std::vector<int32_t>(s.begin(), s.end()))
              << "\n";
  }
  return 0;
}

}  // namespace

Runner setup_data(CLI::App& sub) {
  sub.require_subcommand(1);
  auto o = std::make_shared<PrepareOptions>();
  auto no_cache = std::make_shared<bool>(false);
  CLI::App* p = sub.add_subcommand("prepare", "tokenize documents into train/val token shards");
  p->add_option("--tokenizer", o->tokenizer,
                "tokenizer.model (SentencePiece) or tokenizer.json (Hugging Face)")
      ->required()
      ->check(CLI::ExistingFile);
  p->add_option("--input", o->inputs, "text files or globs (.txt, .jsonl, optionally .gz)")
      ->required();
  p->add_option("--out", o->out_dir, "output folder (shards and index.json)")->required();
  p->add_option("--val-fraction", o->val_fraction, "fraction of documents for validation")
      ->capture_default_str();
  p->add_option("--threads", o->threads, "encoding threads")->capture_default_str();
  p->add_option("--text-field", o->text_field, "JSONL field with the text")->capture_default_str();
  p->add_option("--shard-tokens", o->shard_tokens, "tokens per shard file")->capture_default_str();
  p->add_flag("--overwrite", o->overwrite, "replace an existing output folder");
  p->add_flag("--no-word-cache", *no_cache,
              "encode whole documents (slower; the output is the same)");

  auto dir = std::make_shared<std::string>();
  auto seq_len = std::make_shared<int64_t>(256);
  auto source = std::make_shared<DataSource>();
  auto vocab = std::make_shared<int64_t>(0);
  auto tok = std::make_shared<std::string>();
  CLI::App* i = sub.add_subcommand(
      "inspect", "check a data source (headers, sizes, checksums or ids) and show a sample");
  i->add_option("dir", *dir, "shard folder, token file (or glob) or Megatron prefix")->required();
  i->add_option("--seq-len", *seq_len, "sample length to count samples with")
      ->capture_default_str();
  add_format_option(*i, source->format, "shards, tokens or megatron");
  i->add_option("--dtype", source->dtype,
                "tokens: uint16, uint32, int32 or int64 (a .npy file's header gives its own)");
  i->add_option("--eos", source->eos, "end-of-document id: documents are counted");
  i->add_option("--vocab-size", *vocab,
                "ids must lie below it (default: the tokenizer's, else the dtype's range)");
  i->add_option("--tokenizer", *tok,
                "tokenizer.model or tokenizer.json to decode the first sample with");

  return [=] {
    if (p->parsed()) {
      o->word_cache = !*no_cache;
      auto decile = std::make_shared<int>(-1);
      o->progress = [decile](const PrepareProgress& pr) { show_progress(pr, *decile); };
      const PrepareSummary s = data_prepare(*o);
      if (::isatty(STDERR_FILENO)) std::fprintf(stderr, "\n");
      std::printf(
          "wrote %s: train %llu documents, %llu tokens, %llu shards; val %llu documents, %llu "
          "tokens\n",
          o->out_dir.c_str(), static_cast<unsigned long long>(s.documents[0]),
          static_cast<unsigned long long>(s.tokens[0]),
          static_cast<unsigned long long>(s.shards[0]),
          static_cast<unsigned long long>(s.documents[1]),
          static_cast<unsigned long long>(s.tokens[1]));
      std::printf("%.1f MB in %.2f s (%.1f MB/s, %d threads%s)\n",
                  static_cast<double>(s.bytes) / 1e6, s.seconds,
                  static_cast<double>(s.bytes) / 1e6 / s.seconds, o->threads,
                  s.word_cache ? ", word cache" : "");
      return 0;
    }
    if (source->format != DataFormat::Shards) {
      source->path = *dir;
      return inspect_source(*source, *seq_len, *vocab, *tok);
    }
    const ShardIndex idx = shard_index_read(*dir);
    std::cout << *dir << ": " << (idx.token_bytes == 2 ? "uint16" : "uint32")
              << " tokens, vocabulary " << idx.vocab_size << ", tokenizer " << idx.tokenizer_file
              << " (crc32 " << idx.tokenizer_crc32 << ")\n";
    for (const auto& [name, split] : idx.splits) {
      std::cout << "  " << name << ": " << split.documents << " documents, " << split.tokens
                << " tokens, " << split.shards.size() << " shards";
      if (split.tokens > static_cast<uint64_t>(*seq_len)) {
        const TokenDataset data(*dir, name, *seq_len, /*verify=*/true);
        std::cout << ", " << data.num_samples() << " samples of " << *seq_len << " (checksums ok)";
      }
      std::cout << "\n";
    }
    if (std::filesystem::exists(idx.tokenizer_file) && idx.splits.count("train")) {
      const TokenDataset data(*dir, "train", std::min<int64_t>(*seq_len, 32), false);
      std::vector<int64_t> s(static_cast<size_t>(data.seq_len() + 1));
      data.sample(0, s.data());
      std::cout << "  first sample: "
                << Tokenizer(idx.tokenizer_file).decode(std::vector<int32_t>(s.begin(), s.end()))
                << "\n";
    }
    return 0;
  };
}

}  // namespace normlab::cli
