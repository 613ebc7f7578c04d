// normlab eval --checkpoint SRC [--data SHARDS] [--tasks FILE ...] [--batches N] [--out
// RESULT.json] Validation loss and perplexity (per token and per byte) and zero-shot
// multiple-choice accuracy (tasks.h) of a trained model.
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "command.h"
#include "eval_data.h"
#include "fault.h"
#include "normlab/data/loader.h"
#include "normlab/data/shard.h"
#include "normlab/data/tokenizer.h"
#include "normlab/eval/evaluate.h"
#include "normlab/eval/tasks.h"
#include "normlab/nn/model.h"
#include "normlab/train/export.h"
#include "normlab/util/file_io.h"
#include "normlab/util/library_error.h"
#include "normlab/util/output_contract.h"

namespace normlab::cli {
namespace fs = std::filesystem;

Runner setup_eval(CLI::App& sub) {
  struct Options {
    std::string checkpoint, data, split = "val", dtype, tokenizer, out, device = "cpu";
    DataFormat format = DataFormat::Shards;
    std::vector<std::string> tasks;
    int64_t batches = 0, batch = 8, seq_len = 0;
    bool overwrite = false;
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
  CLI::Option* out_flag = sub.add_option(
      "--out", o->out,
      "also write the results as JSON to this file (new, or the results of an earlier eval, "
      "which it keeps as FILE.prev; any other file is refused: docs/reliability.md)");
  sub.add_flag("--overwrite", o->overwrite, "replace the --out file, whoever wrote it");
  return [o, out_flag] {
    if (o->data.empty() && o->tasks.empty())
      throw std::invalid_argument("give --data SHARDS, --tasks FILE..., or both");
    if (o->batch < 1) throw std::invalid_argument("--batch must be at least 1");
    // The output contract (util/output_contract.h): before any work. The ledger of the folder
    // that holds --out proves a file there the results of an earlier eval.
    std::unique_ptr<OutputFiles> contract;
    const fs::path out(o->out);
    if (out_flag->count() > 0) {
      std::vector<OutputInput> inputs = {{"--checkpoint", o->checkpoint, /*may_contain_out=*/true},
                                         {"--data", o->data},
                                         {"--tokenizer", o->tokenizer}};
      for (const std::string& t : o->tasks) inputs.push_back({"--tasks", t});
      check_output_path("--out", o->out, inputs, /*folder=*/false);
      contract = std::make_unique<OutputFiles>(
          out.has_parent_path() ? out.parent_path().string() : ".", "eval", o->overwrite);
      contract->claim({out.filename().string()});
    }
    std::vector<std::pair<std::string, std::vector<McItem>>> tasks;  // all read before any work
    for (const auto& t : o->tasks) tasks.emplace_back(fs::path(t).stem().string(), load_mc_task(t));
    const torch::Device device(o->device);
    LoadedModel m = load_model(o->checkpoint, device);
    check_fault_target(environment_fault(), m.model->config.n_layers);
    const std::unique_ptr<ForwardHooks> fault_hooks = forward_fault(environment_fault());
    if (fault_hooks) m.model->hooks = fault_hooks.get();  // tests only (fault.h)
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
      EvalResult r;
      try {
        r = evaluate(*m.model, loader, o->batches, device, false, tok ? &bytes : nullptr);
      } catch (...) {
        rethrow_with_context("evaluation of " + o->data);
      }
      const std::string part =
          o->format == DataFormat::Shards ? o->split : std::string(enum_name(o->format));
      if (!r.nonfinite.empty())
        throw std::runtime_error(part + ": the loss is not a finite number (" + r.nonfinite + ", " +
                                 m.from + ")" + (contract ? "; --out was not written" : ""));
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
      McResult r;
      try {
        r = evaluate_mc(*m.model, *tok, items, o->batch, device);
      } catch (...) {
        rethrow_with_context("task " + name);
      }
      std::cout << std::fixed << std::setprecision(4) << "task " << name << ": acc " << r.acc
                << ", acc_norm " << r.acc_norm << " (" << r.items << " items)\n";
      result["tasks"][name] = {{"acc", r.acc}, {"acc_norm", r.acc_norm}, {"items", r.items}};
    }
    if (contract) {
      const std::string text = result.dump(2) + "\n";
      if (out.has_parent_path()) fs::create_directories(out.parent_path());
      contract->keep_previous();
      write_file_atomic(o->out, [&](FileWriter& w) { w.write(text); });
      contract->record({out.filename().string()});
      for (const std::string& note : contract->notes())
        std::cerr << "normlab eval: note: " << note << "\n";
    }
    return 0;
  };
}

}  // namespace normlab::cli
