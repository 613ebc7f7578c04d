#include "support.h"

#include "normlab/data/data_prepare.h"
#include "normlab/data/tokenizer.h"
#include "normlab/nn/norm.h"

#include <unistd.h>
#include <zlib.h>

#include <fstream>
#include <limits>
#include <random>

#include <nlohmann/json.hpp>
#include <sstream>

namespace normlab::test {

std::string error_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

ModelConfig tiny_config(Scheme scheme) {
  ModelConfig c;
  c.scheme = scheme;
  c.vocab_size = 32;
  c.d_model = 16;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_ff = 24;
  return c;
}

LossAndGrads loss_and_grads(DecoderLM& m, const torch::Tensor& tokens) {
  m->zero_grad();
  const LossOutput out = m->loss(tokens, tokens.roll(-1, 1));
  out.loss.backward();
  LossAndGrads r{out.loss.item<double>(), out.logits.detach(), {}};
  for (const auto& p : m->named_parameters()) r.grads[p.key()] = p.value().grad().clone();
  return r;
}

ScratchDir::ScratchDir(const std::string& tag) {
  static int counter = 0;
  path = std::filesystem::temp_directory_path() /
         ("normlab_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  std::filesystem::remove_all(path);
  std::filesystem::create_directories(path);
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

double max_rel_error(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor a64 = a.detach().to(torch::kDouble).cpu(),
                      b64 = b.detach().to(torch::kDouble).cpu();
  const double scale = std::max(b64.abs().max().item<double>(), 1e-30);
  return (a64 - b64).abs().max().item<double>() / scale;
}

::testing::AssertionResult close(const torch::Tensor& a, const torch::Tensor& b, double tol) {
  if (a.sizes() != b.sizes()) {
    std::ostringstream s;
    s << "shapes differ: " << a.sizes() << " vs " << b.sizes();
    return ::testing::AssertionFailure() << s.str();
  }
  const double err = max_rel_error(a, b);
  if (err <= tol) return ::testing::AssertionSuccess();
  std::ostringstream s;
  s << "relative error " << err << " > " << tol
    << "\n  first values: " << a.detach().flatten().slice(0, 0, 5).to(torch::kDouble)
    << "\n  expected:     " << b.detach().flatten().slice(0, 0, 5).to(torch::kDouble);
  return ::testing::AssertionFailure() << s.str();
}

::testing::AssertionResult close_per_element(const torch::Tensor& a, const torch::Tensor& b,
                                             double rtol, double floor, double* worst) {
  if (a.sizes() != b.sizes()) {
    std::ostringstream s;
    s << "shapes differ: " << a.sizes() << " vs " << b.sizes();
    return ::testing::AssertionFailure() << s.str();
  }
  const torch::Tensor a64 = a.detach().to(torch::kDouble).cpu().flatten(),
                      b64 = b.detach().to(torch::kDouble).cpu().flatten();
  const double scale = b64.numel() ? b64.abs().max().item<double>() : 0.0;
  const torch::Tensor err = (a64 - b64).abs();
  const torch::Tensor bound = b64.abs() * rtol + floor * scale;
  // err / bound (with 0/0 = 0 for an exact zero) and NaN anywhere counts as a failure.
  const torch::Tensor ratio = torch::where(err == 0, torch::zeros_like(err), err / bound)
                                  .nan_to_num(std::numeric_limits<double>::infinity());
  const int64_t i = ratio.numel() ? ratio.argmax().item<int64_t>() : 0;
  const double r = ratio.numel() ? ratio[i].item<double>() : 0.0;
  if (worst) *worst = r * rtol;
  if (r <= 1.0) return ::testing::AssertionSuccess();
  std::ostringstream s;
  s.precision(17);
  s << "element " << i << " of " << a64.numel() << ": " << a64[i].item<double>() << " vs "
    << b64[i].item<double>() << ", |diff| " << err[i].item<double>() << " = " << r
    << " x its bound (" << rtol << " x |ref| + " << floor << " x max|ref| " << scale << ")";
  return ::testing::AssertionFailure() << s.str();
}

namespace {

template <class T>
std::optional<T> optional_field(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  return j[key].get<T>();
}

}  // namespace

Golden load_golden(const std::string& name, const std::string& dir) {
  Golden g;
  g.content = safetensors_load(data_path(dir + "/" + name + ".safetensors"));
  const auto j = nlohmann::json::parse(g.content.metadata.at("config"));
  ModelConfig& c = g.config;
  c.scheme = enum_from_name<Scheme>(j.at("scheme").get<std::string>(), "scheme");
  c.vocab_size = j.at("vocab_size");
  c.d_model = j.at("d_model");
  c.n_layers = j.at("n_layers");
  c.n_heads = j.at("n_heads");
  c.n_kv_heads = j.at("n_kv_heads");
  c.d_ff = j.at("d_ff");
  c.rope_theta = j.at("rope_theta");
  c.norm_eps = j.at("norm_eps");
  c.norm_type = enum_from_name<NormType>(j.at("norm_type").get<std::string>(), "norm_type");
  c.tie_embeddings = j.at("tie_embeddings");
  c.qkv_norm = j.at("qkv_norm");
  if (j.contains("qk_norm"))  // goldens written before full q/k norms have none
    c.qk_norm = enum_from_name<QkNorm>(j.at("qk_norm").get<std::string>(), "qk_norm");
  c.siamese.depth_scale = j.at("siamese_depth_scale");
  c.siamese.input_norm = j.at("siamese_input_norm");
  c.siamese.output_fusion = enum_from_name<OutputFusion>(
      j.at("siamese_output_fusion").get<std::string>(), "output_fusion");
  c.deep_norm_alpha = optional_field<double>(j, "deep_norm_alpha");
  c.mix_ln_post_layers = optional_field<int64_t>(j, "mix_ln_post_layers");
  // hyper's goldens (tests/reference/hyper_ref.py) into model.hyper; SiameseNorm x HC's
  // (tests/reference/siamese_hyper_ref.py) into model.siamese.hyper.
  if (j.contains("hyper_n")) {
    const bool siamese = c.scheme == Scheme::Siamese || c.scheme == Scheme::SiameseHybrid;
    HyperOptions& h = siamese ? static_cast<HyperOptions&>(c.siamese.hyper) : c.hyper;
    h.n = j.at("hyper_n");
    h.dynamic = j.at("hyper_dynamic");
    h.tanh = j.at("hyper_tanh");
    h.variant =
        enum_from_name<HyperVariant>(j.at("hyper_variant").get<std::string>(), "hyper_variant");
  }
  g.z_loss = j.at("z_loss");
  if (j.contains("moe_n_experts")) {
    c.moe.n_experts = j.at("moe_n_experts");
    c.moe.top_k = j.at("moe_top_k");
    c.moe.d_expert = j.at("moe_d_expert");
    c.moe.renormalize = j.at("moe_renormalize");
    c.moe.every = j.at("moe_every");
    c.moe.lb_loss_weight = j.at("moe_lb_loss_weight");
    c.moe.z_loss_weight = j.at("moe_z_loss_weight");
  }
  return g;
}

std::vector<std::string> golden_names(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(data_path(dir)))
    if (e.path().extension() == ".safetensors") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string synthetic_corpus(int docs, uint64_t seed) {
  static const char* const kWords[] = {
      "the",    "and",    "of",        "to",   "in",    "he",       "that",  "shall",  "unto",
      "for",    "his",    "they",      "be",   "is",    "him",      "not",   "them",   "with",
      "all",    "thou",   "thy",       "was",  "which", "my",       "me",    "said",   "but",
      "ye",     "their",  "have",      "will", "thee",  "from",     "as",    "are",    "when",
      "this",   "out",    "were",      "upon", "man",   "by",       "you",   "Israel", "king",
      "son",    "people", "house",     "day",  "land",  "children", "naïve", "café",   "Œuvre",
      "Straße", "日本語", "🙂",      "ﬁne",  "x²",    "1234",     "3.14",  "(word)", "end.",
      "well,",  "ok;",    "\"quoted\""};
  std::mt19937_64 rng(seed);
  std::string out;
  for (int d = 0; d < docs; ++d) {
    if (d) out += "\n\n";
    const int lines = 1 + static_cast<int>(rng() % 4);
    for (int l = 0; l < lines; ++l) {
      if (l) out += '\n';
      const int words = 3 + static_cast<int>(rng() % 14);
      for (int w = 0; w < words; ++w) {
        if (w) out += (rng() % 17 == 0) ? "  " : " ";
        out += kWords[rng() % (sizeof kWords / sizeof *kWords)];
      }
    }
  }
  return out + "\n";
}

const std::string& test_tokenizer_path() {
  static ScratchDir dir("shared_tok");
  static const std::string path = [] {
    write_text(dir / "corpus.txt", synthetic_corpus(400, 1));
    TokenizerTrainOptions o;
    o.inputs = {dir / "corpus.txt"};
    o.vocab_size = 400;
    o.out_dir = dir.path.string();
    return tokenizer_train(o);
  }();
  return path;
}

std::string prepare_test_shards(const ScratchDir& dir, int docs, uint64_t seed,
                                double val_fraction) {
  write_text(dir / "a.txt", synthetic_corpus(docs, seed));
  PrepareOptions o;
  o.tokenizer = test_tokenizer_path();
  o.inputs = {dir / "a.txt"};
  o.out_dir = dir / "shards";
  o.val_fraction = val_fraction;
  data_prepare(o);
  return o.out_dir;
}

void write_text(const std::string& path, const std::string& text) {
  if (path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0) {
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
    gzclose(f);
  } else {
    std::ofstream(path, std::ios::binary) << text;
  }
}

double directional_derivative(const std::function<torch::Tensor()>& f, torch::Tensor x,
                              const torch::Tensor& v, double eps) {
  torch::NoGradGuard no_grad;
  const torch::Tensor orig = x.clone();
  x.add_(v, eps);
  const double up = f().item<double>();
  x.copy_(orig).add_(v, -eps);
  const double down = f().item<double>();
  x.copy_(orig);
  return (up - down) / (2.0 * eps);
}

::testing::AssertionResult add_rms_norm_matches_reference(torch::Device device, torch::ScalarType s,
                                                          torch::ScalarType bt, int64_t rows,
                                                          int64_t cols, double divisor,
                                                          double tol) {
  torch::manual_seed(rows * 131 + cols);
  // Inputs are rounded to their storage dtypes first, so the reference sees what the op sees.
  const torch::Tensor x0 = torch::randn({rows, cols}, torch::kDouble).to(s).to(torch::kDouble);
  const torch::Tensor b0 = torch::randn({rows, cols}, torch::kDouble).to(bt).to(torch::kDouble);
  const torch::Tensor w0 =
      torch::rand({cols}, torch::kDouble).add(0.5).to(torch::kFloat).to(torch::kDouble);
  const torch::Tensor cr = torch::randn({rows, cols}, torch::kDouble),
                      cn = torch::randn({rows, cols}, torch::kDouble);
  const double eps = 1e-5;
  for (int use = 0; use < 3; ++use) {  // loss on n only, on r and n, on r only
    const auto loss = [&](const torch::Tensor& r, const torch::Tensor& n) {
      torch::Tensor l = torch::zeros({}, torch::kDouble);
      if (use <= 1) l = l + (n.to(torch::kDouble).cpu() * cn).sum();
      if (use >= 1) l = l + (r.to(torch::kDouble).cpu() * cr).sum();
      return l;
    };
    const torch::Tensor xr = x0.clone().requires_grad_(), br = b0.clone().requires_grad_(),
                        wr = w0.clone().requires_grad_();
    const torch::Tensor rr = xr + br / divisor;
    const torch::Tensor nr = wr * rr * torch::rsqrt(rr.pow(2).mean(-1, true) + eps);
    const auto gref = torch::autograd::grad({loss(rr, nr)}, {xr, br, wr}, {}, std::nullopt, false,
                                            /*allow_unused=*/true);

    const torch::Tensor x = x0.to(device, s).requires_grad_(),
                        b = b0.to(device, bt).requires_grad_();
    Norm norm(NormOptions(cols).eps(eps).device(device));
    norm->weight.data().copy_(w0);
    const torch::Tensor& w = norm->weight;
    const auto [r, n] = norm->add_forward(x, b, divisor);
    if (r.scalar_type() != s || n.scalar_type() != s || r.device() != device)
      return ::testing::AssertionFailure()
             << "outputs " << r.scalar_type() << "/" << n.scalar_type() << " on " << r.device()
             << ", expected " << s << " on " << device;
    const auto got = torch::autograd::grad({loss(r, n)}, {x, b, w}, {}, std::nullopt, false,
                                           /*allow_unused=*/true);
    const std::pair<const char*, std::pair<torch::Tensor, torch::Tensor>> checks[] = {
        {"r", {r, rr}},
        {"n", {n, nr}},
        {"grad x", {got[0], gref[0]}},
        {"grad b", {got[1], gref[1]}}};
    for (const auto& [what, pair] : checks) {
      // b's gradient is stored in b's dtype: bf16 holds it to 8 bits.
      const double t =
          bt == torch::kBFloat16 && std::string(what) == "grad b" ? std::max(tol, 1e-2) : tol;
      const auto result =
          close(pair.first.detach().to(torch::kDouble).cpu(), pair.second.detach(), t);
      if (!result)
        return ::testing::AssertionFailure()
               << what << " (loss " << use << "): " << result.message();
    }
    if (use <= 1) {  // w only gets a gradient through n
      const auto result = close(got[2].to(torch::kDouble).cpu(), gref[2], tol);
      if (!result)
        return ::testing::AssertionFailure() << "grad w (loss " << use << "): " << result.message();
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace normlab::test
