// Zero-shot multiple-choice evaluation in the manner of lm-eval-harness: a task is a JSONL file
// of items {"context": "...", "choices": ["...", ...], "answer": index}; each choice is scored
// by the summed log-probability of its tokens after the context (the text context + choice,
// tokenized as one string, preceded by EOS as a document start). Accuracy picks the highest
// sum; length-normalised accuracy divides each sum by the choice's UTF-8 byte length first.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "normlab/data/tokenizer.h"
#include "normlab/nn/model.h"

namespace normlab {

struct McItem {
  std::string context;
  std::vector<std::string> choices;  // appended to the context as written (include the space)
  int64_t answer = 0;
};

/// Reads a task file; throws std::invalid_argument naming the file, the line and the key.
std::vector<McItem> load_mc_task(const std::string& path);

struct McResult {
  std::string task;  // the file's stem
  int64_t items = 0;
  double acc = 0.0;       // fraction of items whose highest-scoring choice is the answer
  double acc_norm = 0.0;  // the same with scores divided by the choice's byte length
  std::vector<std::vector<double>> scores;  // per item, per choice: summed log-probability
};

/// Scores every choice of every item, `batch` sequences per forward pass (grouped by length).
McResult evaluate_mc(DecoderLMImpl& model, const Tokenizer& tokenizer,
                     const std::vector<McItem>& items, int64_t batch, torch::Device device);

}  // namespace normlab
