// Evaluation: perplexity is exp(mean loss) and the per-byte numbers follow from the byte table
// (a model with a zero head predicts uniformly: loss ln V exactly); multiple-choice scoring
// equals scoring each choice alone without batching or padding, and picks the answer it should.
#include <cmath>
#include <fstream>
#include <limits>

#include "normlab/data/data_prepare.h"
#include "normlab/data/tokenizer.h"
#include "normlab/eval/evaluate.h"
#include "normlab/eval/tasks.h"
#include "normlab/util/error.h"
#include "support.h"

using namespace normlab;

namespace {

DecoderLM evaluation_model_of(int64_t vocab) {
  ModelConfig c = test::tiny_config(Scheme::SiameseHybrid);
  c.vocab_size = vocab;
  torch::manual_seed(11);
  return DecoderLM(c);
}

// The summed log-probability of `choice`'s tokens after `context`, one sequence, no batching.
double score_alone(DecoderLMImpl& m, const Tokenizer& tok, const std::string& context,
                   const std::string& choice) {
  torch::NoGradGuard g;
  const auto ctx = tok.encode(context);
  const auto whole = tok.encode(context + choice);
  size_t keep = std::min(ctx.size(), whole.size() - 1);
  while (keep > 0 &&
         !std::equal(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(keep), ctx.begin()))
    --keep;
  std::vector<int64_t> ids = {tok.eos_id()};
  ids.insert(ids.end(), whole.begin(), whole.end());
  const torch::Tensor logp =
      m.forward(torch::tensor(ids, torch::kLong).unsqueeze(0)).log_softmax(-1)[0];
  double sum = 0;
  for (size_t t = 1 + keep; t < ids.size(); ++t)
    sum += logp[static_cast<int64_t>(t - 1)][ids[t]].item<double>();
  return sum;
}

// Shards of a small synthetic text in `dir`, and a loader over their validation split: batches
// of 4 sequences of 16 tokens.
ValLoader val_loader_in(const test::ScratchDir& dir) {
  test::write_text(dir / "a.txt", test::synthetic_corpus(200, 5));
  PrepareOptions p;
  p.tokenizer = test::test_tokenizer_path();
  p.inputs = {dir / "a.txt"};
  p.out_dir = dir / "shards";
  p.val_fraction = 0.2;
  data_prepare(p);
  return ValLoader(std::make_shared<TokenDataset>(dir / "shards", "val", 16), 4);
}

}  // namespace

TEST(Evaluation, PerplexityIsExpOfTheMeanLossAndBytesFollow) {
  test::ScratchDir dir("eval");
  const ValLoader loader = val_loader_in(dir);

  DecoderLM m = evaluation_model_of(400);
  {
    torch::NoGradGuard g;
    m->head->weight.zero_();  // uniform predictions: every token costs ln 400
  }
  const std::vector<int32_t> two_bytes(400, 2);
  const EvalResult r = evaluate(*m, loader, 0, torch::kCPU, false, &two_bytes);
  EXPECT_NEAR(r.loss, std::log(400.0), 1e-6);
  EXPECT_NEAR(r.perplexity, 400.0, 1e-3);
  EXPECT_EQ(r.tokens, loader.num_batches() * 4 * 16);
  EXPECT_EQ(r.bytes, 2 * r.tokens);
  EXPECT_NEAR(r.byte_perplexity, 20.0, 1e-4);  // exp(ln 400 / 2)
  EXPECT_NEAR(r.bits_per_byte, std::log2(400.0) / 2, 1e-6);

  // A trained-looking model: perplexity is exp of the token-weighted mean loss.
  DecoderLM n = evaluation_model_of(400);
  const EvalResult q = evaluate(*n, loader, 0, torch::kCPU, false);
  double sum = 0;
  int64_t count = 0;
  for (int64_t k = 0; k < loader.num_batches(); ++k) {
    const Batch b = loader.batch(k);
    torch::NoGradGuard g;
    sum += n->loss(b.inputs, b.targets).ce.item<double>() * static_cast<double>(b.targets.numel());
    count += b.targets.numel();
  }
  EXPECT_NEAR(q.loss, sum / static_cast<double>(count), 1e-6);
  EXPECT_NEAR(q.perplexity, std::exp(sum / static_cast<double>(count)), 1e-6 * q.perplexity);
  EXPECT_EQ(q.bytes, 0);
}

// A loss that is not a finite number says where it went non-finite first: the batch, and the
// logits' first NaN or infinity.
TEST(Evaluation, ANonFiniteLossSaysWhatWentNonFinite) {
  test::ScratchDir dir("eval_nonfinite");
  const ValLoader loader = val_loader_in(dir);
  DecoderLM m = evaluation_model_of(400);
  EXPECT_EQ(evaluate(*m, loader, 0, torch::kCPU, false).nonfinite, "");
  {
    torch::NoGradGuard g;
    m->head->weight[7].fill_(std::numeric_limits<float>::infinity());
  }
  const EvalResult r = evaluate(*m, loader, 0, torch::kCPU, false);
  EXPECT_FALSE(std::isfinite(r.loss));
  EXPECT_EQ(
      r.nonfinite.rfind("batch 1 of " + std::to_string(loader.num_batches()) + ": the loss is ", 0),
      0u)
      << r.nonfinite;
  // The loss's value is spelt as first_nonfinite spells an element: NaN, +inf or -inf.
  const std::string after = r.nonfinite.substr(r.nonfinite.find("the loss is ") + 12);
  EXPECT_TRUE(after.rfind("NaN;", 0) == 0 || after.rfind("+inf;", 0) == 0 ||
              after.rfind("-inf;", 0) == 0)
      << r.nonfinite;
  EXPECT_NE(r.nonfinite.find("; the logits hold "), std::string::npos) << r.nonfinite;
  EXPECT_NE(r.nonfinite.find(", 7] (its first non-finite element;"), std::string::npos)
      << r.nonfinite;
}

TEST(Evaluation, TokenByteLengthsMatchTheText) {
  const Tokenizer tok(test::test_tokenizer_path());
  const auto bytes = tok.token_byte_lengths();
  ASSERT_EQ(static_cast<int64_t>(bytes.size()), tok.vocab_size());
  EXPECT_EQ(bytes[static_cast<size_t>(tok.eos_id())], 0);
  for (const std::string text : {"In the beginning was the word", "naïve café déjà vu", "x"}) {
    int64_t n = 0;
    for (int32_t id : tok.encode(text)) n += bytes[static_cast<size_t>(id)];
    EXPECT_EQ(n, static_cast<int64_t>(text.size()) + 1) << text;  // + the dummy-prefix space
  }
}

TEST(Evaluation, MultipleChoiceScoresEqualScoringAloneAndPickTheBest) {
  const Tokenizer tok(test::test_tokenizer_path());
  DecoderLM m = evaluation_model_of(400);
  std::vector<McItem> items = {
      {"The light of the", {" morning", " evening and the night", " a", " sea"}, 0},
      {"And he said", {" unto them", " nothing"}, 0},
      {"naïve", {" café", " déjà vu ever after", " x"}, 0},
  };
  // Independent scores; make each item's answer its best raw choice, except the last item,
  // whose answer is its worst.
  std::vector<std::vector<double>> alone(items.size());
  for (size_t i = 0; i < items.size(); ++i)
    for (const auto& c : items[i].choices)
      alone[i].push_back(score_alone(*m, tok, items[i].context, c));
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& s = alone[i];
    const auto best = std::max_element(s.begin(), s.end()) - s.begin();
    const auto worst = std::min_element(s.begin(), s.end()) - s.begin();
    items[i].answer = i + 1 < items.size() ? best : worst;
  }
  for (int64_t batch : {1, 2, 16}) {
    const McResult r = evaluate_mc(*m, tok, items, batch, torch::kCPU);
    for (size_t i = 0; i < items.size(); ++i)
      for (size_t c = 0; c < items[i].choices.size(); ++c)
        EXPECT_NEAR(r.scores[i][c], alone[i][c], 1e-4)
            << "batch " << batch << " item " << i << " choice " << c;
    EXPECT_NEAR(r.acc, 2.0 / 3.0, 1e-12) << batch;
  }
  // acc_norm from the same scores divided by byte lengths.
  const McResult r = evaluate_mc(*m, tok, items, 4, torch::kCPU);
  int right = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    size_t best = 0;
    for (size_t c = 1; c < items[i].choices.size(); ++c)
      if (alone[i][c] / items[i].choices[c].size() > alone[i][best] / items[i].choices[best].size())
        best = c;
    right += static_cast<int64_t>(best) == items[i].answer;
  }
  EXPECT_NEAR(r.acc_norm, right / 3.0, 1e-12);
}

TEST(Evaluation, TaskFilesAreCheckedLineByLine) {
  test::ScratchDir dir("tasks");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"context\": \"a\", \"choices\": [\" b\", \" c\"], \"answer\": 2}",
       ":1: answer: 2 is not an index of the 2 choices"},
      {"{\"context\": \"a\", \"choices\": [\" b\"], \"answer\": 0}",
       ":1: choices: expected a list of at least two"},
      {"{\"choices\": [\" b\", \" c\"], \"answer\": 0}", ":1: context: expected a string"},
      {"\n{\"context\": \"a\", \"choices\": [\" b\", \"\"], \"answer\": 0}",
       ":2: choices: expected non-empty strings"},
      {"{\"context\": \"a\", \"choices\": [\" b\", \" c\"], \"answer\": \"b\"}",
       ":1: answer: expected the index"},
      {"not json", ":1: invalid JSON"},
      {"", "no items"},
  };
  for (const auto& [text, expect] : cases) {
    std::ofstream(dir / "t.jsonl") << text;
    try {
      load_mc_task(dir / "t.jsonl");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("t.jsonl"), std::string::npos) << e.what();
    }
  }
  std::ofstream(dir / "ok.jsonl")
      << "{\"context\": \"a\", \"choices\": [\" b\", \" c\"], \"answer\": 1}\n\n";
  EXPECT_EQ(load_mc_task(dir / "ok.jsonl").size(), 1u);
}
