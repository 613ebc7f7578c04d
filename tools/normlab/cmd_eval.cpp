// normlab eval --checkpoint SRC [--data SHARDS] [--tasks FILE ...] [--batches N] [--out
// RESULT.json] Validation loss and perplexity (per token and per byte) and zero-shot
// multiple-choice accuracy (tasks.h) of a trained model.
#include <filesystem>
#include <iomanip>
#include <iostream>

#include <nlohmann/json.hpp>

#include "command.h"
#include "eval_data.h"
#include "normlab/data/loader.h"
#include "normlab/data/shard.h"
#include "normlab/data/tokenizer.h"
#include "normlab/eval/evaluate.h"
#include "normlab/eval/tasks.h"
#include "normlab/train/export.h"
#include "normlab/util/file_io.h"

namespace normlab::cli {
namespace fs = std::filesystem;

namespace {

// --out replaces only what an earlier eval wrote there (a JSON object with model, scheme, step),
// checked before any work; anything else at that path is the user's, and stays.
void check_result_file(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(path, ec);
  if (ec || !fs::exists(st)) return;
  bool ours = false;
  if (fs::is_regular_file(fs::status(path, ec))) {
    try {
      const auto j = nlohmann::json::parse(read_file(path));
      ours = j.is_object() && j.contains("model") && j.contains("scheme") && j.contains("step");
    } catch (const std::exception&) {
      ours = false;
    }
  }
  if (!ours)
    throw std::invalid_argument(path + ": exists and is not the results of a normlab eval; " +
                                "--out replaces only those: choose another path (nothing was "
                                "changed)");
}

}  // namespace

Runner setup_eval(CLI::App& sub) {
  struct Options {
    std::string checkpoint, data, split = "val", format = "shards", dtype, tokenizer, out,
                                  device = "cpu";
    std::vector<std::string> tasks;
    int64_t batches = 0, batch = 8, seq_len = 0;
  };
  auto o = std::make_shared<Options>();
  sub.add_option("--checkpoint", o->checkpoint,
                 "run folder (newest checkpoint), checkpoint folder or export folder")
      ->required();
  sub.add_option("--data", o->data,
                 "tokens to evaluate (loss and perplexity): a shard folder (its --split), a "
                 "token array or a Megatron dataset (--format)");
  sub.add_option("--split", o->split, "val or train (shard folders)")->capture_default_str();
  add_data_format_options(sub, o->format, o->dtype);
  sub.add_option("--tasks", o->tasks,
                 "multiple-choice task files (JSONL: context, choices, answer)");
  sub.add_option("--batches", o->batches, "validation batches (0: the whole split)")
      ->capture_default_str();
  sub.add_option("--batch", o->batch, "sequences per forward pass")->capture_default_str();
  sub.add_option("--seq-len", o->seq_len,
                 "tokens per validation sequence (default: the run's data.seq_len, else 256)");
  sub.add_option("--tokenizer", o->tokenizer,
                 "tokenizer.model or tokenizer.json (default: the run's or the export's)");
  sub.add_option("--device", o->device, "cpu, cuda or cuda:N")->capture_default_str();
  sub.add_option("--out", o->out,
                 "also write the results as JSON to this file (new, or the results of an earlier "
                 "eval, which it replaces; any other file is refused)");
  return [o] {
    if (o->data.empty() && o->tasks.empty())
      throw std::invalid_argument("give --data SHARDS, --tasks FILE..., or both");
    if (o->batch < 1) throw std::invalid_argument("--batch must be at least 1");
    if (!o->out.empty()) check_result_file(o->out);
    std::vector<std::pair<std::string, std::vector<McItem>>> tasks;  // all read before any work
    for (const auto& t : o->tasks) tasks.emplace_back(fs::path(t).stem().string(), load_mc_task(t));
    const torch::Device device(o->device);
    LoadedModel m = load_model(o->checkpoint, device);
    const std::string tok_path = o->tokenizer.empty() ? m.tokenizer : o->tokenizer;
    std::unique_ptr<Tokenizer> tok;
    if (!tok_path.empty() && fs::exists(tok_path)) tok = std::make_unique<Tokenizer>(tok_path);
    if (!tasks.empty() && !tok)
      throw std::invalid_argument("the tasks need the model's tokenizer: none recorded with " +
                                  m.from + ", give --tokenizer");
    std::cout << "model " << m.from << " (" << enum_name(m.model->config.scheme) << ", step "
              << m.step << ")\n";
    nlohmann::json result = {{"model", m.from},
                             {"scheme", std::string(enum_name(m.model->config.scheme))},
                             {"step", m.step}};

    if (!o->data.empty()) {
      const int64_t seq_len = o->seq_len > 0 ? o->seq_len : m.seq_len > 0 ? m.seq_len : 256;
      const auto data = open_eval_data(o->data, o->format, o->dtype, o->split, seq_len,
                                       m.model->config.vocab_size, tok ? tok->path() : "");
      const ValLoader loader(data, std::min<int64_t>(o->batch, data->num_samples()));
      const std::vector<int32_t> bytes = tok ? tok->token_byte_lengths() : std::vector<int32_t>{};
      const EvalResult r =
          evaluate(*m.model, loader, o->batches, device, false, tok ? &bytes : nullptr);
      const std::string part = o->format == "shards" ? o->split : o->format;
      std::cout << std::fixed << std::setprecision(4) << part << ": loss " << r.loss
                << ", perplexity " << r.perplexity << " (" << r.tokens << " tokens)";
      if (r.bytes > 0)
        std::cout << "; per byte: perplexity " << r.byte_perplexity << ", " << r.bits_per_byte
                  << " bits";
      std::cout << "\n";
      result["data"] = {{"path", o->data},
                        {"split", part},
                        {"loss", r.loss},
                        {"perplexity", r.perplexity},
                        {"tokens", r.tokens}};
      if (r.bytes > 0) {
        result["data"]["bytes"] = r.bytes;
        result["data"]["byte_perplexity"] = r.byte_perplexity;
        result["data"]["bits_per_byte"] = r.bits_per_byte;
      }
    }
    for (const auto& [name, items] : tasks) {
      const McResult r = evaluate_mc(*m.model, *tok, items, o->batch, device);
      std::cout << std::fixed << std::setprecision(4) << "task " << name << ": acc " << r.acc
                << ", acc_norm " << r.acc_norm << " (" << r.items << " items)\n";
      result["tasks"][name] = {{"acc", r.acc}, {"acc_norm", r.acc_norm}, {"items", r.items}};
    }
    if (!o->out.empty()) {
      const std::string text = result.dump(2) + "\n";
      write_file_atomic(o->out, [&](FileWriter& w) { w.write(text); });
    }
    return 0;
  };
}

}  // namespace normlab::cli
