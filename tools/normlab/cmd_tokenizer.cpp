// normlab tokenizer train | encode | decode (encode and decode: SentencePiece or tokenizer.json)
#include <iostream>
#include <sstream>

#include "command.h"
#include "normlab/data/text_input.h"
#include "normlab/data/tokenizer.h"
#include "normlab/util/output_contract.h"

namespace normlab::cli {

Runner setup_tokenizer(CLI::App& sub) {
  sub.require_subcommand(1);
  auto train = std::make_shared<TokenizerTrainOptions>();
  auto model_type = std::make_shared<std::string>("bpe");
  CLI::App* t = sub.add_subcommand("train", "train a SentencePiece tokenizer (byte fallback on)");
  t->add_option("--input", train->inputs, "text files or globs (.txt, .jsonl, optionally .gz)")
      ->required();
  t->add_option("--vocab-size", train->vocab_size,
                "vocabulary size: at least 259 + the text's distinct characters (261 at the "
                "least; docs/data.md)")
      ->capture_default_str();
  t->add_option("--model-type", *model_type, "bpe or unigram")
      ->check(CLI::IsMember({"bpe", "unigram"}))
      ->capture_default_str();
  t->add_option("--out", train->out_dir,
                "output folder: tokenizer.model, tokenizer.vocab (other files there stay; an "
                "earlier tokenizer train's are kept as NAME.prev, other files of those names "
                "stop it: docs/reliability.md)")
      ->required();
  auto overwrite = std::make_shared<bool>(false);
  t->add_flag("--overwrite", *overwrite,
              "replace a tokenizer.model or tokenizer.vocab in --out, whoever wrote it (never "
              "one that token shards were prepared with)");
  t->add_option("--threads", train->threads, "training threads")->capture_default_str();
  t->add_option("--text-field", train->text_field, "JSONL field with the text")
      ->capture_default_str();
  t->add_option("--max-sentences", train->max_sentences, "lines sampled for training (0 = all)")
      ->capture_default_str();
  t->add_option("--seed", train->seed, "sampling seed")->capture_default_str();

  struct CodecOptions {
    std::string tokenizer;
    std::string text;
    std::vector<std::string> files;
    bool pieces = false;
    std::vector<int32_t> ids;
  };
  auto enc = std::make_shared<CodecOptions>();
  CLI::App* e =
      sub.add_subcommand("encode", "print the token ids of a text (or of files' documents)");
  e->add_option("--tokenizer", enc->tokenizer,
                "tokenizer.model (SentencePiece) or tokenizer.json (Hugging Face)")
      ->required()
      ->check(CLI::ExistingFile);
  e->add_option("--text", enc->text, "the text to encode");
  e->add_option("files", enc->files, "files whose documents to encode");
  e->add_flag("--pieces", enc->pieces, "print pieces instead of ids");

  auto dec = std::make_shared<CodecOptions>();
  CLI::App* d = sub.add_subcommand("decode", "print the text of token ids");
  d->add_option("--tokenizer", dec->tokenizer,
                "tokenizer.model (SentencePiece) or tokenizer.json (Hugging Face)")
      ->required()
      ->check(CLI::ExistingFile);
  d->add_option("ids", dec->ids, "token ids")->required();

  return [=] {
    if (t->parsed()) {
      train->model = *model_type == "bpe" ? TokenizerModel::Bpe : TokenizerModel::Unigram;
      // The output contract (util/output_contract.h): before any work.
      std::vector<OutputInput> inputs;
      for (const std::string& in : train->inputs) inputs.push_back({"--input", in});
      check_output_path("--out", train->out_dir, inputs);
      OutputFiles contract(train->out_dir, "tokenizer train", *overwrite);
      contract.claim({"tokenizer.model", "tokenizer.vocab"});
      train->contract = &contract;
      const std::string path = tokenizer_train(*train);
      for (const std::string& note : contract.notes())
        std::cerr << "normlab tokenizer train: note: " << note << "\n";
      const Tokenizer tok(path);
      std::cout << "wrote " << path << " (" << tok.vocab_size() << " pieces, eos " << tok.eos_id()
                << ")\n";
      return 0;
    }
    if (e->parsed()) {
      const Tokenizer tok(enc->tokenizer);
      auto print = [&](const std::string& text) {
        std::ostringstream line;
        const auto ids = tok.encode(text);
        for (size_t i = 0; i < ids.size(); ++i)
          line << (i ? " " : "") << (enc->pieces ? tok.piece(ids[i]) : std::to_string(ids[i]));
        std::cout << line.str() << "\n";
      };
      if (const size_t bad = utf8_error_offset(enc->text); bad != std::string::npos)
        throw InputError("--text: not valid UTF-8 (byte " + std::to_string(bad) + ")");
      if (!enc->text.empty()) print(enc->text);
      for (const auto& f : expand_inputs(enc->files))
        read_documents(f, "text", [&](std::string&& doc) { print(doc); });
      if (enc->text.empty() && enc->files.empty())
        throw InputError("tokenizer encode: give --text or files");
      return 0;
    }
    std::cout << Tokenizer(dec->tokenizer).decode(dec->ids) << "\n";
    return 0;
  };
}

}  // namespace normlab::cli
