// normlab generate --checkpoint SRC --prompt "..." [--max-tokens N] [--temperature T]
//                  [--top-k K] [--top-p P] [--seed S]
// Streams the continuation to stdout as it is generated (KV cache; generate.h).
#include <filesystem>
#include <iostream>
#include <memory>

#include "command.h"
#include "normlab/data/text_input.h"
#include "normlab/data/tokenizer.h"
#include "normlab/eval/generate.h"
#include "normlab/train/export.h"
#include "normlab/util/device.h"
#include "normlab/util/output_contract.h"
#include "normlab/util/safetensors.h"

namespace normlab::cli {

Runner setup_generate(CLI::App& sub) {
  struct Options {
    std::string checkpoint, prompt, tokenizer, device = "cpu";
    SampleOptions sample;
    bool no_cache = false;
    std::string logits_out;
  };
  auto o = std::make_shared<Options>();
  sub.add_option("--checkpoint", o->checkpoint,
                 "run folder (newest checkpoint), checkpoint folder or export folder")
      ->required();
  sub.add_option("--prompt", o->prompt, "the text to continue")->required();
  sub.add_option("--max-tokens", o->sample.max_tokens, "new tokens at most")->capture_default_str();
  sub.add_option("--temperature", o->sample.temperature, "0 = greedy")->capture_default_str();
  sub.add_option("--top-k", o->sample.top_k, "sample from the k most likely tokens (0 = all)")
      ->capture_default_str();
  sub.add_option("--top-p", o->sample.top_p, "nucleus sampling: the smallest set reaching p")
      ->capture_default_str();
  sub.add_option("--seed", o->sample.seed, "sampling seed")->capture_default_str();
  sub.add_option("--tokenizer", o->tokenizer,
                 "tokenizer.model or tokenizer.json (default: the run's or the export's)");
  sub.add_option("--device", o->device, "cpu, cuda or cuda:N")->capture_default_str();
  sub.add_flag("--no-cache", o->no_cache,
               "recompute the whole sequence for every token (slow; for checking)");
  // Hidden, for checking other implementations (tests/cli/hf_export.sh): a safetensors file with
  // the prompt's ids ("tokens", EOS first), their logits from one forward pass ("logits", fp32)
  // and the generated ids ("generated").
  CLI::Option* logits_flag = sub.add_option("--logits-out", o->logits_out)->group("");
  return [o, logits_flag] {
    check_sample_options(o->sample);  // before any work: a bad number is named at once
    // The output contract (util/output_contract.h), before any work: a file there is replaced
    // only when an earlier generate wrote it (kept as FILE.prev).
    std::unique_ptr<OutputFiles> contract;
    const std::filesystem::path lo(o->logits_out);
    if (logits_flag->count() > 0) {
      check_output_path("--logits-out", o->logits_out,
                        {{"--checkpoint", o->checkpoint, /*may_contain_out=*/true},
                         {"--tokenizer", o->tokenizer}},
                        /*folder=*/false);
      contract =
          std::make_unique<OutputFiles>(lo.has_parent_path() ? lo.parent_path().string() : ".",
                                        "generate", false, "--logits-out");
      contract->claim({lo.filename().string()});
    }
    const torch::Device device(o->device);
    LoadedModel m = load_model(o->checkpoint, device);
    const std::string tok_path = o->tokenizer.empty() ? m.tokenizer : o->tokenizer;
    if (tok_path.empty())
      throw std::invalid_argument("no tokenizer recorded with " + m.from + ": give --tokenizer");
    if (const size_t bad = utf8_error_offset(o->prompt); bad != std::string::npos)
      throw InputError("--prompt: not valid UTF-8 (byte " + std::to_string(bad) + ")");
    const Tokenizer tok(tok_path);
    std::vector<int64_t> prompt = {tok.eos_id()};  // a document start, as in training
    for (int32_t id : tok.encode(o->prompt)) prompt.push_back(id);
    // Before anything is printed: a count past the memory is refused here, not mid-stream.
    check_generate_fits(*m.model, static_cast<int64_t>(prompt.size()), o->sample.max_tokens,
                        device_capacity_bytes(device), device.str());
    if (m.seq_len > 0 && static_cast<int64_t>(prompt.size()) + o->sample.max_tokens > m.seq_len)
      std::cerr << "normlab generate: warning: " << prompt.size() << " prompt tokens and up to "
                << o->sample.max_tokens << " new ones go past the " << m.seq_len
                << " positions the model was trained on (data.seq_len); text past them may "
                   "degrade\n";
    SampleOptions s = o->sample;
    s.stop_token = tok.eos_id();
    s.vocab_limit = tok.vocab_size();  // ids beyond it (a padded vocabulary) have no text
    s.use_cache = !o->no_cache;
    // Stream: decode the whole continuation each time and print what is new (pieces can be
    // parts of a UTF-8 character).
    std::vector<int32_t> ids(prompt.begin() + 1, prompt.end());
    std::string shown = tok.decode(ids);
    std::cout << shown << std::flush;
    std::vector<int64_t> generated;
    generate(*m.model, prompt, s, [&](int64_t id) {
      generated.push_back(id);
      if (id == tok.eos_id()) return true;
      ids.push_back(static_cast<int32_t>(id));
      const std::string text = tok.decode(ids);
      if (text.size() > shown.size() && text.compare(0, shown.size(), shown) == 0)
        std::cout << text.substr(shown.size()) << std::flush;
      shown = text;
      return true;
    });
    std::cout << "\n";
    if (contract) {
      torch::NoGradGuard no_grad;
      const auto ids = torch::tensor(prompt, torch::kLong);
      const auto logits = m.model->forward(ids.unsqueeze(0).to(device))[0].to(torch::kFloat32);
      contract->keep_previous();
      safetensors_save(o->logits_out, {{"tokens", ids},
                                       {"logits", logits.cpu()},
                                       {"generated", torch::tensor(generated, torch::kLong)}});
      contract->record({lo.filename().string()});
    }
    return 0;
  };
}

}  // namespace normlab::cli
