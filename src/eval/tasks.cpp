#include "normlab/eval/tasks.h"

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <sstream>

#include "normlab/util/file_io.h"

namespace normlab {

std::vector<McItem> load_mc_task(const std::string& path) {
  std::istringstream in(read_file(path));
  std::vector<McItem> items;
  int64_t n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string at = path + ":" + std::to_string(n) + ": ";
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw DataError(at + "invalid JSON (" + e.what() + ")");
    }
    McItem item;
    if (!j.is_object() || !j.contains("context") || !j["context"].is_string())
      throw DataError(at + "context: expected a string");
    item.context = j["context"];
    if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].size() < 2)
      throw DataError(at + "choices: expected a list of at least two strings");
    for (const auto& c : j["choices"]) {
      if (!c.is_string() || c.get<std::string>().empty())
        throw DataError(at + "choices: expected non-empty strings");
      item.choices.push_back(c);
    }
    if (!j.contains("answer") || !j["answer"].is_number_integer())
      throw DataError(at + "answer: expected the index of the right choice");
    item.answer = j["answer"];
    if (item.answer < 0 || item.answer >= static_cast<int64_t>(item.choices.size()))
      throw DataError(at + "answer: " + std::to_string(item.answer) + " is not an index of the " +
                      std::to_string(item.choices.size()) + " choices");
    items.push_back(std::move(item));
  }
  if (items.empty()) throw DataError(path + ": no items");
  return items;
}

McResult evaluate_mc(DecoderLMImpl& model, const Tokenizer& tok, const std::vector<McItem>& items,
                     int64_t batch, torch::Device device) {
  TORCH_CHECK(batch > 0, "evaluate_mc: batch must be positive");
  torch::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();

  // One sequence per (item, choice): EOS + tokens(context + choice); the scored tokens are those
  // past tokens(context) (the harness convention: the split is where the context's own
  // tokenization ends).
  struct Seq {
    size_t item, choice;
    std::vector<int64_t> ids;
    size_t first_scored;  // index into ids of the first continuation token
  };
  std::vector<Seq> seqs;
  for (size_t i = 0; i < items.size(); ++i) {
    const auto ctx = tok.encode(items[i].context);
    for (size_t c = 0; c < items[i].choices.size(); ++c) {
      const auto whole = tok.encode(items[i].context + items[i].choices[c]);
      size_t keep = std::min(ctx.size(), whole.size() - 1);  // at least one scored token
      while (keep > 0 &&
             !std::equal(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(keep),
                         ctx.begin()))
        --keep;
      Seq s{i, c, {tok.eos_id()}, 1 + keep};
      s.ids.insert(s.ids.end(), whole.begin(), whole.end());
      seqs.push_back(std::move(s));
    }
  }
  McResult r;
  r.items = static_cast<int64_t>(items.size());
  r.scores.resize(items.size());
  for (size_t i = 0; i < items.size(); ++i) r.scores[i].assign(items[i].choices.size(), 0.0);

  std::vector<size_t> order(seqs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return seqs[a].ids.size() < seqs[b].ids.size(); });
  for (size_t start = 0; start < order.size(); start += static_cast<size_t>(batch)) {
    const size_t end = std::min(order.size(), start + static_cast<size_t>(batch));
    size_t len = 0;
    for (size_t k = start; k < end; ++k) len = std::max(len, seqs[order[k]].ids.size());
    // Right-padded: causal attention never lets a real position see the padding after it.
    torch::Tensor input = torch::zeros(
        {static_cast<int64_t>(end - start), static_cast<int64_t>(len - 1)}, torch::kLong);
    for (size_t k = start; k < end; ++k) {
      const auto& ids = seqs[order[k]].ids;
      input[static_cast<int64_t>(k - start)]
          .narrow(0, 0, static_cast<int64_t>(ids.size() - 1))
          .copy_(torch::tensor(std::vector<int64_t>(ids.begin(), ids.end() - 1), torch::kLong));
    }
    const torch::Tensor logp =
        model.forward(input.to(device)).to(torch::kFloat).log_softmax(-1).cpu();
    const auto lp = logp.accessor<float, 3>();
    for (size_t k = start; k < end; ++k) {
      const Seq& s = seqs[order[k]];
      double sum = 0.0;
      for (size_t t = s.first_scored; t < s.ids.size(); ++t)  // token t predicted at position t - 1
        sum += lp[static_cast<int64_t>(k - start)][static_cast<int64_t>(t - 1)][s.ids[t]];
      r.scores[s.item][s.choice] = sum;
    }
  }
  int64_t right = 0, right_norm = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& sc = r.scores[i];
    size_t best = 0, best_norm = 0;
    for (size_t c = 1; c < sc.size(); ++c) {
      if (sc[c] > sc[best]) best = c;
      const auto norm = [&](size_t k) {
        return sc[k] / static_cast<double>(items[i].choices[k].size());
      };
      if (norm(c) > norm(best_norm)) best_norm = c;
    }
    right += static_cast<int64_t>(best) == items[i].answer;
    right_norm += static_cast<int64_t>(best_norm) == items[i].answer;
  }
  r.acc = static_cast<double>(right) / static_cast<double>(items.size());
  r.acc_norm = static_cast<double>(right_norm) / static_cast<double>(items.size());
  model.train(was_training);
  return r;
}

}  // namespace normlab
