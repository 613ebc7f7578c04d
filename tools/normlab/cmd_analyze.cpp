// normlab analyze --checkpoint SRC --data SHARDS --out DIR [--batch N] [--top-k K] [--no-pruning]
// The paper's diagnostics (diagnostics.h) on one trained model: DIR/diagnostics.jsonl, a
// per-layer table on the console, and the plots (tools/plot_diagnostics.py).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "command.h"
#include "eval_data.h"
#include "normlab/data/loader.h"
#include "normlab/data/shard.h"
#include "normlab/eval/diagnostics.h"
#include "normlab/train/export.h"
#include "normlab/util/device.h"
#include "normlab/util/file_io.h"
#include "normlab/util/output_contract.h"
#include "python_tool.h"

namespace normlab::cli {
namespace fs = std::filesystem;

namespace {

// The per-layer picture on the console: stream RMS, the gradient reaching each stream, the
// branch gradients, the logit-lens agreement and the pruning loss.
void print_table(const DiagnosticsReport& r, int64_t n_layers) {
  const bool twin = r.rms.size() > 1;
  std::printf("%6s %10s%s %10s%s %10s %10s %8s%s %10s\n", "layer", "rms x",
              twin ? "      rms y" : "", "grad x", twin ? "     grad y" : "", "attn grad",
              "mlp grad", "lens x", twin ? "   lens y" : "", "pruned loss");
  auto at = [](const std::vector<PerStream>& v, size_t s, size_t i) {
    return s < v.size() && i < v[s].values.size() ? v[s].values[i] : std::nan("");
  };
  for (int64_t l = -1; l < n_layers; ++l) {
    const size_t i = static_cast<size_t>(l + 1);
    std::printf("%6s %10.4g", l < 0 ? "entry" : std::to_string(l).c_str(), at(r.rms, 0, i));
    if (twin) std::printf(" %10.4g", at(r.rms, 1, i));
    std::printf(" %10.4g", at(r.stream_grad, 0, i));
    if (twin) std::printf(" %10.4g", at(r.stream_grad, 1, i));
    const bool block = l >= 0;
    const size_t b = static_cast<size_t>(std::max<int64_t>(l, 0));
    std::printf(" %10.4g %10.4g", block && b < r.attn_grad.size() ? r.attn_grad[b] : std::nan(""),
                block && b < r.mlp_grad.size() ? r.mlp_grad[b] : std::nan(""));
    std::printf(" %8.3f", at(r.lens, 0, i));
    if (twin) std::printf(" %8.3f", at(r.lens, 1, i));
    std::printf(" %10.4f\n", block && b < r.pruning.size() ? r.pruning[b] : std::nan(""));
  }
  std::printf("loss %.4f on the batch", r.loss);
  if (r.pruning_base) std::printf(" (pruned loss: the same with that block skipped)");
  std::printf("\n");
  for (const auto& g : r.gains)
    if (g.layer < 0)
      std::printf("final fusion gains: x %.3f, y %.3f (ratio %.3f)\n", g.x_gain, g.y_gain, g.ratio);
  if (r.routing.empty()) return;
  // MoE: the routed share of each expert per layer, in % of the layer's assignments (balanced:
  // 100 / E each), as a text heat map.
  std::printf("MoE routing, %% of each layer's assignments per expert:\n%6s", "layer");
  for (size_t e = 0; e < r.routing[0].share.size(); ++e) std::printf(" %5zu", e);
  std::printf(" %8s %5s\n", "entropy", "idle");
  for (const auto& m : r.routing) {
    std::printf("%6lld", static_cast<long long>(m.layer));
    for (double f : m.share) std::printf(" %5.1f", 100.0 * f);
    std::printf(" %8.3f %5lld\n", m.entropy, static_cast<long long>(m.idle));
  }
}

}  // namespace

Runner setup_analyze(CLI::App& sub) {
  struct Options {
    std::string checkpoint, data, split, dtype, out, device = "cpu";
    DataFormat format = DataFormat::Shards;
    int64_t batch = 8, top_k = 4, seq_len = 0;
    bool no_pruning = false, no_plots = false, overwrite = false;
  };
  auto o = std::make_shared<Options>();
  sub.add_option("--checkpoint", o->checkpoint,
                 "run folder (newest checkpoint), checkpoint folder or export folder")
      ->required();
  sub.add_option("--data", o->data,
                 "tokens: a shard folder (normlab data prepare), a token array or a Megatron "
                 "dataset (--format)")
      ->required();
  sub.add_option("--split", o->split, "val or train (default: val when the shard folder has it)");
  add_data_format_options(sub, o->format, o->dtype);
  sub.add_option("--out", o->out,
                 "output folder: diagnostics.jsonl and the plots (an earlier analyze's are kept "
                 "as NAME.prev; other files of those names stop it: docs/reliability.md)")
      ->required();
  sub.add_flag("--overwrite", o->overwrite,
               "replace files of the names analyze writes, whoever wrote them");
  sub.add_option("--batch", o->batch, "sequences of the batch (the first of the split)")
      ->capture_default_str();
  sub.add_option("--seq-len", o->seq_len,
                 "tokens per sequence (default: the run's data.seq_len, else 256)");
  sub.add_option("--top-k", o->top_k, "massive activations kept per layer and stream")
      ->capture_default_str();
  sub.add_option("--device", o->device, "cpu, cuda or cuda:N")->capture_default_str();
  sub.add_flag("--no-pruning", o->no_pruning, "skip the pruning curve (n_layers forward passes)");
  sub.add_flag("--no-plots", o->no_plots, "do not run tools/plot_diagnostics.py");
  return [o] {
    if (o->batch < 1) throw std::invalid_argument("--batch must be at least 1");
    if (o->top_k < 0) throw std::invalid_argument("--top-k must be 0 or more");
    // The output contract (util/output_contract.h): before any work.
    check_output_path(
        "--out", o->out,
        {{"--checkpoint", o->checkpoint, /*may_contain_out=*/true}, {"--data", o->data}});
    OutputFiles contract(o->out, "analyze", o->overwrite);
    std::vector<std::string> plots =
        o->no_plots ? std::vector<std::string>{} : diagnostics_plot_files();
    std::vector<std::string> names = {"diagnostics.jsonl"};
    names.insert(names.end(), plots.begin(), plots.end());
    contract.claim(names);
    const torch::Device device(o->device);
    LoadedModel m = load_model(o->checkpoint, device);
    const int64_t seq_len = o->seq_len > 0 ? o->seq_len : m.seq_len > 0 ? m.seq_len : 256;
    std::string split = o->split;
    if (split.empty() && o->format == DataFormat::Shards)
      split = shard_index_read(o->data).splits.count("val") ? "val" : "train";
    const auto data = open_eval_data(o->data, o->format, o->dtype, split, seq_len,
                                     m.model->config.vocab_size, "");
    const Batch b = ValLoader(data, std::min<int64_t>(o->batch, data->num_samples())).batch(0);

    DiagnosticsOptions opts;
    opts.top_k = o->top_k;
    opts.pruning = !o->no_pruning;
    DiagnosticsReport r =
        run_diagnostics(*m.model, b.inputs.to(device), b.targets.to(device), opts);
    r.step = m.step;
    fs::create_directories(o->out);
    const std::string line = diagnostics_json(r) + "\n";
    const std::string path = (fs::path(o->out) / "diagnostics.jsonl").string();
    contract.keep_previous(/*by_link=*/true, {"diagnostics.jsonl"});
    write_file_atomic(path, [&](FileWriter& w) { w.write(line); });
    contract.record({"diagnostics.jsonl"});

    std::cout << "model " << m.from << " (" << enum_name(m.model->config.scheme) << ", step "
              << m.step << "), " << b.inputs.size(0) << " x " << seq_len << " tokens of " << o->data
              << " ("
              << (o->format == DataFormat::Shards ? split : std::string(enum_name(o->format)))
              << ")\n";
    print_table(r, m.model->config.n_layers);
    if (!o->no_plots) {
      contract.keep_previous(/*by_link=*/false, plots);  // matplotlib writes in place
      run_python_tool("plot_diagnostics.py", {path, o->out}, "plots");
      contract.record(plots);
    }
    for (const std::string& note : contract.notes())
      std::cerr << "normlab analyze: note: " << note << "\n";
    std::cout << "diagnostics: " << path << "\n";
    return 0;
  };
}

}  // namespace normlab::cli
