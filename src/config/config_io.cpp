// The configuration schema (one visit() per section: key, field, doc) and the three things
// done with it: decode YAML strictly, encode the resolved config, list the documented keys.
// This is the only translation unit that includes yaml-cpp.
#include "normlab/config/config_io.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <sstream>

namespace normlab {
namespace {

// ---- the schema ---------------------------------------------------------------------------

template <class V>
void visit(V& v, SiameseOptions& s) {
  v("depth_scale", s.depth_scale,
    "divide the X-stream update by c_l = sqrt(2(l+1)) (off: c_l = 1)");
  v("input_norm", s.input_norm, "normalized input fusion: N_in before each shared branch");
  v("output_fusion", s.output_fusion,
    "end of network: code = N(N_x(X) + N_y(Y)), paper = N_x(X) + N_y(Y)");
}

template <class V>
void visit(V& v, ModelConfig& m) {
  v("scheme", m.scheme, "normalization scheme (docs/schemes.md)");
  v("vocab_size", m.vocab_size, "vocabulary size; the tokenizer's must fit");
  v("d_model", m.d_model, "hidden width");
  v("n_layers", m.n_layers, "number of blocks");
  v("n_heads", m.n_heads, "attention heads; head dim = d_model / n_heads (even)");
  v("n_kv_heads", m.n_kv_heads,
    "key/value heads: 0 = n_heads (full multi-head), fewer = grouped-query");
  v("d_ff", m.d_ff, "SwiGLU intermediate width");
  v("rope_theta", m.rope_theta, "RoPE base");
  v("norm_type", m.norm_type, "norm of every norm position, q/k/v norms included");
  v("norm_eps", m.norm_eps, "epsilon of every norm");
  v("qkv_norm", m.qkv_norm,
    "per-head norms on q, k, v before RoPE (always on for the hybrid schemes)");
  v("tie_embeddings", m.tie_embeddings, "use the embedding matrix as the LM head");
  v("init", m.init, "weight initialisation (docs/schemes.md)");
  v("init_std", m.init_std, "base std of the normal and megatron inits");
  v.section("siamese", m.siamese, "SiameseNorm switches (siamese, siamese_hybrid)");
  v("deep_norm_alpha", m.deep_norm_alpha, "DeepNorm residual scale; null = (2L)^(1/4)");
  v("deep_norm_beta", m.deep_norm_beta, "DeepNorm init scale; null = (8L)^(-1/4)");
  v("mix_ln_post_layers", m.mix_ln_post_layers,
    "Mix-LN: Post-Norm blocks at the bottom; null = floor(L/4)");
}

template <class V>
void visit(V& v, DataConfig& d) {
  v("train", d.train, "folder of training token shards (normlab data prepare)");
  v("val", d.val, "folder of validation shards; empty = the train folder's validation split");
  v("tokenizer", d.tokenizer, "SentencePiece model of the shards");
  v("seq_len", d.seq_len, "tokens per training sample");
}

template <class V>
void visit(V& v, OptimizerConfig& o) {
  v("lr", o.lr, "peak learning rate (AdamW)");
  v("beta1", o.beta1, "AdamW beta1");
  v("beta2", o.beta2, "AdamW beta2");
  v("eps", o.eps, "AdamW epsilon");
  v("weight_decay", o.weight_decay, "decoupled weight decay; never on norm gains, c1 or biases");
  v("decay_embeddings", o.decay_embeddings, "apply weight decay to the embedding and head");
  v("grad_clip", o.grad_clip, "clip the global gradient norm to this; 0 = off");
  v("fused", o.fused,
    "one fused AdamW kernel (at::_fused_adamw_); false = the reference per-tensor loop");
}

template <class V>
void visit(V& v, SchedulerConfig& s) {
  v("kind", s.kind, "learning-rate schedule");
  v("warmup_steps", s.warmup_steps, "linear warm-up steps from 0 to the peak");
  v("final_lr_fraction", s.final_lr_fraction,
    "lr at the end as a fraction of the peak (cosine, linear, wsd)");
  v("decay_fraction", s.decay_fraction, "wsd: fraction of the steps spent decaying at the end");
}

template <class V>
void visit(V& v, TrainConfig& t) {
  v("steps", t.steps, "optimizer steps");
  v("global_batch", t.global_batch, "sequences per optimizer step over all ranks");
  v("micro_batch", t.micro_batch, "sequences per forward/backward on one rank");
  v("seed", t.seed, "seed of initialisation and data order");
  v("device", t.device, "auto (CUDA when available), cpu, cuda or cuda:N");
  v("precision", t.precision,
    "auto = bf16 autocast on CUDA and fp32 on CPU; fp64 = weights, optimizer state, activations "
    "and FSDP traffic in float64 (exact checks against a reference; slow)");
  v("z_loss", t.z_loss, "weight of the z-loss mean(logsumexp(logits)^2); 0 = off");
  v("skip_nonfinite", t.skip_nonfinite,
    "skip steps whose loss or gradient is not finite instead of ending the run as diverged");
  v("spike_window", t.spike_window, "loss-spike detector: rolling window of steps");
  v("spike_sigma", t.spike_sigma,
    "loss-spike detector: a spike is a loss above mean + sigma * std of the window");
  v("loss_chunk_rows", t.loss_chunk_rows,
    "> 0: cross-entropy over chunks of this many token rows, gradients formed in the forward, "
    "never the whole (tokens x vocabulary) logits; 0 = the plain loss");
  v("activation_checkpointing", t.activation_checkpointing,
    "none; block: keep only each block's inputs and recompute the block in the backward (less "
    "memory, about one more forward); selective: the same for every selective_every-th block only");
  v("selective_every", t.selective_every,
    "activation_checkpointing: selective checkpoints blocks 0, k, 2k, ... for k = this (2: half "
    "the blocks)");
}

template <class V>
void visit(V& v, EvalConfig& e) {
  v("every", e.every,
    "evaluate on the validation split every N steps (and at the end); 0 = only at the end");
  v("at_start", e.at_start,
    "also evaluate the initial weights before the first step (metrics.jsonl line of step 0)");
  v("batches", e.batches, "validation batches per evaluation; 0 = the whole split");
  v("micro_batch", e.micro_batch, "sequences per validation batch; 0 = train.micro_batch");
  v("tasks", e.tasks,
    "multiple-choice task files (JSONL, docs/evaluation.md), comma-separated: accuracy at every "
    "evaluation");
}

template <class V>
void visit(V& v, DiagnosticsConfig& d) {
  v("every", d.every,
    "run the paper's diagnostics every N steps into diagnostics.jsonl (docs/diagnostics.md); 0 = "
    "off");
  v("batch", d.batch,
    "sequences of the fixed diagnostics batch (the first of the validation split)");
  v("top_k", d.top_k, "massive activations kept per layer and stream; 0 = none");
  v("pruning", d.pruning,
    "also the loss with each block skipped in turn (n_layers more forward passes)");
}

template <class V>
void visit(V& v, CheckpointConfig& c) {
  v("every", c.every, "save a checkpoint every N steps (and at the end); 0 = only at the end");
  v("keep", c.keep, "keep the last K checkpoints");
  v("at_end", c.at_end,
    "save a checkpoint after the last step (false: benchmarks; a stop signal still saves)");
}

template <class V>
void visit(V& v, LoggingConfig& l) {
  v("every", l.every, "console progress line every N steps (metrics.jsonl gets every step)");
  v("level", l.level, "debug, info, warn or error");
  v("tensorboard", l.tensorboard,
    "also write the metrics (and diagnostics' stream norms) as TensorBoard event files under "
    "RUN_DIR/tensorboard/");
}

template <class V>
void visit(V& v, DistributedConfig& d) {
  v("backend", d.backend,
    "collective engine over several processes: auto = nccl on CUDA, mpi on CPU");
  v("timeout_seconds", d.timeout_seconds,
    "a collective that waits longer ends the run with an error naming it");
  v("reshard_after_forward", d.reshard_after_forward,
    "FSDP: free each block's gathered weights after its forward (less memory, one more "
    "all-gather)");
  v("prefetch", d.prefetch,
    "FSDP: start the next block's all-gather before running this one (overlaps on GPUs)");
  v("force_fsdp", d.force_fsdp,
    "FSDP even in a single process (on CUDA through NCCL): measures the layer's cost");
  v("param_dtype", d.param_dtype,
    "FSDP: dtype of the parameter all-gathers; auto = bf16 when training in bf16 (the compute "
    "dtype), else fp32 (fp64 with train.precision = fp64, which also reduces in fp64)");
  v("reduce_dtype", d.reduce_dtype,
    "FSDP: dtype of the gradient reduce-scatter; fp32 (exact sums), bf16 (half the traffic), auto "
    "= param_dtype");
}

template <class V>
void visit(V& v, RunConfig& r) {
  v.section("model", r.model, "architecture and initialisation");
  v.section("data", r.data, "token shards and tokenizer");
  v.section("optimizer", r.optimizer, "AdamW");
  v.section("scheduler", r.scheduler, "learning-rate schedule");
  v.section("train", r.train, "the training loop");
  v.section("eval", r.eval, "evaluation during training");
  v.section("diagnostics", r.diagnostics, "the paper's diagnostics during training");
  v.section("checkpoint", r.checkpoint, "checkpoints");
  v.section("logging", r.logging, "console and log output");
  v.section("distributed", r.distributed, "multi-process training (FSDP, docs/distributed.md)");
}

// ---- scalar codecs --------------------------------------------------------------------------

template <class E>
struct IsEnum : std::bool_constant<std::is_enum_v<E>> {};

template <class T>
std::string type_name() {
  if constexpr (std::is_same_v<T, bool>)
    return "bool";
  else if constexpr (std::is_integral_v<T>)
    return "integer";
  else if constexpr (std::is_floating_point_v<T>)
    return "float";
  else if constexpr (std::is_same_v<T, std::string>)
    return "string";
  else if constexpr (std::is_enum_v<T>)
    return "one of: " + enum_names_joined<T>();
  else
    return "?";
}

std::string scalar_text(const YAML::Node& n) {
  return n.IsScalar()     ? "'" + n.Scalar() + "'"
         : n.IsMap()      ? "a map"
         : n.IsSequence() ? "a list"
                          : "nothing";
}

// What a value of T looks like, for "expected ..." messages.
template <class T>
std::string expected_phrase() {
  if constexpr (std::is_same_v<T, bool>)
    return "true or false";
  else if constexpr (std::is_integral_v<T>)
    return "an integer";
  else if constexpr (std::is_floating_point_v<T>)
    return "a number";
  else if constexpr (std::is_same_v<T, std::string>)
    return "a string";
  else
    return "one of " + enum_names_joined<T>();
}

// Parses a YAML scalar into T; returns an error message or "".
template <class T>
std::string parse_scalar(const YAML::Node& n, T& out) {
  if (!n.IsScalar()) return "expected " + expected_phrase<T>() + ", got " + scalar_text(n);
  const std::string s = n.Scalar();
  if constexpr (std::is_same_v<T, bool>) {
    if (s == "true")
      out = true;
    else if (s == "false")
      out = false;
    else
      return "expected true or false, got '" + s + "'";
  } else if constexpr (std::is_integral_v<T>) {
    T v{};
    const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    if (r.ec != std::errc() || r.ptr != s.data() + s.size())
      return "expected an integer, got '" + s + "'";
    out = v;
  } else if constexpr (std::is_floating_point_v<T>) {
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v))
      return "expected a number, got '" + s + "'";
    out = v;
  } else if constexpr (std::is_same_v<T, std::string>) {
    out = s;
  } else if constexpr (std::is_enum_v<T>) {
    for (const auto& row : EnumNames<T>::rows)
      if (s == row.name) {
        out = row.value;
        return "";
      }
    return "unknown value '" + s + "' (valid: " + enum_names_joined<T>() + ")";
  }
  return "";
}

template <class T>
std::string to_text(const T& v) {
  if constexpr (std::is_same_v<T, bool>)
    return v ? "true" : "false";
  else if constexpr (std::is_integral_v<T>)
    return std::to_string(v);
  else if constexpr (std::is_floating_point_v<T>) {
    // The shortest text that reads back exactly; positional for ordinary magnitudes
    // (10000.0, not 1e+04), and always recognisably a float (1 -> 1.0).
    const bool positional = v == 0 || (std::abs(v) >= 1e-3 && std::abs(v) < 1e15);
    char buf[64];
    for (int p = 1; p <= 17; ++p) {
      std::snprintf(buf, sizeof buf, positional ? "%.*f" : "%.*g", p, v);
      if (std::strtod(buf, nullptr) == v) break;
    }
    std::string r = buf;
    if (r.find_first_of(".en") == std::string::npos) r += ".0";
    return r;
  } else if constexpr (std::is_same_v<T, std::string>)
    return v;
  else if constexpr (std::is_enum_v<T>)
    return std::string(enum_name(v));
}

// ---- decode -----------------------------------------------------------------------------------

// Where each leaf came from: the file (or base file) or the --set override.
using Origins = std::map<std::string, std::string>;

class Decoder {
 public:
  Decoder(const YAML::Node& node, std::string prefix, const Origins& origins,
          const std::string& default_origin)
      : node_(node),
        prefix_(std::move(prefix)),
        origins_(origins),
        default_origin_(default_origin) {}

  template <class T>
  void operator()(const char* key, T& field, const char*) {
    keys_.push_back(key);
    const YAML::Node n = node_[key];
    if (!n.IsDefined()) return;
    decode(n, field, prefix_ + key);
  }

  template <class S>
  void section(const char* key, S& sub, const char*) {
    keys_.push_back(key);
    const YAML::Node n = node_[key];
    if (!n.IsDefined() || n.IsNull()) return;
    if (!n.IsMap())
      fail(prefix_ + key, "expected a section (a map of keys), got " + scalar_text(n));
    Decoder child(n, prefix_ + key + ".", origins_, default_origin_);
    visit(child, sub);
    child.reject_unknown();
  }

  void reject_unknown() const {
    for (auto it = node_.begin(); it != node_.end(); ++it) {
      const std::string k = it->first.Scalar();
      if (std::find(keys_.begin(), keys_.end(), k) != keys_.end()) continue;
      const std::string msg = unknown_key_message(k, keys_, prefix_);
      fail(prefix_ + k, msg);
    }
  }

 private:
  template <class T>
  void decode(const YAML::Node& n, T& field, const std::string& path) {
    if constexpr (std::is_same_v<T, std::string>) {
      if (n.IsNull()) {  // `key:` or --set key= : the empty string
        field.clear();
        return;
      }
    }
    const std::string err = parse_scalar(n, field);
    if (!err.empty()) fail(path, err);
  }

  template <class T>
  void decode(const YAML::Node& n, std::optional<T>& field, const std::string& path) {
    if (n.IsNull()) {
      field.reset();
      return;
    }
    T v{};
    decode(n, v, path);
    field = v;
  }

  [[noreturn]] void fail(const std::string& path, const std::string& msg) const {
    throw ConfigError(origin_of(path) + ": " + path + ": " + msg);
  }

  // The file or override that wrote `path`, or a key below it (a map where a value belongs).
  std::string origin_of(const std::string& path) const {
    if (const auto it = origins_.find(path); it != origins_.end()) return it->second;
    if (const auto it = origins_.lower_bound(path + ".");
        it != origins_.end() && it->first.rfind(path + ".", 0) == 0)
      return it->second;
    return default_origin_;
  }

  const YAML::Node node_;
  std::string prefix_;
  const Origins& origins_;
  const std::string& default_origin_;
  std::vector<std::string> keys_;
};

// ---- encode and list ------------------------------------------------------------------------

class Encoder {
 public:
  explicit Encoder(YAML::Emitter& out) : out_(out) {}

  template <class T>
  void operator()(const char* key, T& field, const char*) {
    out_ << YAML::Key << key << YAML::Value;
    if constexpr (is_optional<T>::value) {
      if (field)
        out_ << to_text(*field);
      else
        out_ << YAML::Null;
    } else if constexpr (std::is_same_v<T, std::string>) {
      out_ << YAML::DoubleQuoted << field;
    } else {
      out_ << to_text(field);
    }
  }

  template <class S>
  void section(const char* key, S& sub, const char*) {
    out_ << YAML::Key << key << YAML::Value << YAML::BeginMap;
    visit(*this, sub);
    out_ << YAML::EndMap;
  }

 private:
  template <class T>
  struct is_optional : std::false_type {};
  template <class T>
  struct is_optional<std::optional<T>> : std::true_type {};
  YAML::Emitter& out_;
};

class Lister {
 public:
  Lister(std::vector<ConfigKeyDoc>& rows, std::string prefix)
      : rows_(rows), prefix_(std::move(prefix)) {}

  template <class T>
  void operator()(const char* key, T& field, const char* doc) {
    rows_.push_back({prefix_ + key, type_name<T>(), to_text(field), doc});
  }
  template <class T>
  void operator()(const char* key, std::optional<T>& field, const char* doc) {
    rows_.push_back(
        {prefix_ + key, type_name<T>() + " or null", field ? to_text(*field) : "null", doc});
  }
  void operator()(const char* key, std::string& field, const char* doc) {
    rows_.push_back({prefix_ + key, "string", "\"" + field + "\"", doc});
  }
  template <class S>
  void section(const char* key, S& sub, const char*) {
    Lister child(rows_, prefix_ + key + ".");
    visit(child, sub);
  }

 private:
  std::vector<ConfigKeyDoc>& rows_;
  std::string prefix_;
};

// ---- files, bases and overrides ---------------------------------------------------------------

void record_leaves(const YAML::Node& node, const std::string& origin, const std::string& path,
                   Origins& origins) {
  if (!node.IsMap()) {
    origins[path] = origin;
    return;
  }
  for (auto it = node.begin(); it != node.end(); ++it)
    record_leaves(it->second, origin, path + "." + it->first.Scalar(), origins);
}

// Deep-merges `src` over `dst`, recording the origin of every leaf it writes.
void merge(YAML::Node dst, const YAML::Node& src, const std::string& origin,
           const std::string& prefix, Origins& origins) {
  for (auto it = src.begin(); it != src.end(); ++it) {
    const std::string key = it->first.Scalar();
    if (it->second.IsMap() && dst[key].IsMap()) {
      merge(dst[key], it->second, origin, prefix + key + ".", origins);
    } else {
      dst[key] = YAML::Clone(it->second);
      record_leaves(it->second, origin, prefix + key, origins);
    }
  }
}

YAML::Node load_with_bases(const std::string& path, Origins& origins, int depth) {
  if (depth > 8) throw ConfigError(path + ": `base:` chain deeper than 8 files (a cycle?)");
  std::error_code ec;  // the error_code form: a hostile `base:` (a name too long) must not throw
  if (!std::filesystem::is_regular_file(path, ec))
    throw ConfigError(path + ": config file not found" + (ec ? " (" + ec.message() + ")" : ""));
  YAML::Node doc;
  try {
    doc = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw ConfigError(path + ": invalid YAML: " + e.what());
  }
  if (doc.IsNull()) doc = YAML::Node(YAML::NodeType::Map);
  if (!doc.IsMap()) throw ConfigError(path + ": expected a map of sections at the top level");

  YAML::Node merged(YAML::NodeType::Map);
  if (doc["base"]) {
    if (!doc["base"].IsScalar()) throw ConfigError(path + ": base: expected a file name");
    const auto base = std::filesystem::path(path).parent_path() / doc["base"].Scalar();
    merged = load_with_bases(base.string(), origins, depth + 1);
    doc.remove("base");
  }
  merge(merged, doc, path, "", origins);
  return merged;
}

void apply_override(YAML::Node root, const std::string& text, Origins& origins) {
  const std::string origin = "--set " + text;
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    throw ConfigError(origin + ": expected section.key=value");
  const std::string path = text.substr(0, eq);
  YAML::Node value;
  try {
    value = YAML::Load(text.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    throw ConfigError(origin + ": invalid YAML value: " + e.what());
  }
  std::vector<std::string> parts;
  std::stringstream ss(path);
  for (std::string p; std::getline(ss, p, '.');) {
    if (p.empty()) throw ConfigError(origin + ": empty key in '" + path + "'");
    parts.push_back(p);
  }
  // Walk with copies of node handles (yaml-cpp nodes are references into the tree).
  std::vector<YAML::Node> chain = {root};
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    YAML::Node next = chain.back()[parts[i]];
    if (!next.IsDefined() || next.IsNull()) {
      chain.back()[parts[i]] = YAML::Node(YAML::NodeType::Map);
      next = chain.back()[parts[i]];
    }
    if (!next.IsMap()) throw ConfigError(origin + ": '" + parts[i] + "' is not a section");
    chain.push_back(next);
  }
  chain.back()[parts.back()] = value;
  origins[path] = origin;
}

}  // namespace

RunConfig config_load(const std::string& path, const std::vector<std::string>& overrides) {
  Origins origins;
  YAML::Node root =
      path.empty() ? YAML::Node(YAML::NodeType::Map) : load_with_bases(path, origins, 0);
  for (const auto& o : overrides) apply_override(root, o, origins);

  RunConfig cfg;
  const std::string where = path.empty() ? "<defaults>" : path;
  Decoder top(root, "", origins, where);
  visit(top, cfg);
  top.reject_unknown();
  try {
    validate(cfg);
  } catch (const ConfigError& e) {  // the cross-field checks name the key, not the file
    throw ConfigError(where + ": " + e.what());
  }
  return cfg;
}

std::string config_to_yaml(const RunConfig& cfg_in) {
  RunConfig cfg = cfg_in;
  YAML::Emitter out;
  out << YAML::BeginMap;
  Encoder enc(out);
  visit(enc, cfg);
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

std::vector<ConfigKeyDoc> config_reference() {
  RunConfig defaults;
  std::vector<ConfigKeyDoc> rows;
  Lister lister(rows, "");
  visit(lister, defaults);
  return rows;
}

std::vector<std::pair<std::string, std::string>> config_flatten(const RunConfig& cfg_in) {
  RunConfig cfg = cfg_in;
  std::vector<ConfigKeyDoc> rows;
  Lister lister(rows, "");
  visit(lister, cfg);
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& r : rows) out.emplace_back(r.key, r.default_value);
  return out;
}

std::string config_reference_markdown() {
  std::string out = "| key | type | default | meaning |\n|---|---|---|---|\n";
  for (const auto& r : config_reference())
    out += "| `" + r.key + "` | " + r.type + " | `" + r.default_value + "` | " + r.doc + " |\n";
  return out;
}

// A sweep file's early_stop: "none", "asha", or a map {method: asha, min_steps: N,
// reduction: N}.
EarlyStopSpec early_stop_of(const YAML::Node& n, const std::string& path) {
  EarlyStopSpec e;
  auto fail = [&](const std::string& key, const std::string& msg) {
    throw ConfigError(path + ": early_stop" + key + ": " + msg);
  };
  auto method = [&](const std::string& m, const std::string& key) {
    if (m != "asha" && m != "none") fail(key, "expected asha or none, got '" + m + "'");
    e.asha = m == "asha";
  };
  if (n.IsScalar()) {
    method(n.Scalar(), "");
    return e;
  }
  if (!n.IsMap()) fail("", "expected asha, none or a map of method, min_steps, reduction");
  for (auto it = n.begin(); it != n.end(); ++it) {
    const std::string k = it->first.Scalar();
    if (k == "method" && it->second.IsScalar()) {
      method(it->second.Scalar(), ".method");
    } else if (k == "min_steps" || k == "reduction") {
      int64_t v = 0;
      const std::string err = parse_scalar(it->second, v);
      if (!err.empty()) fail("." + k, err);
      if (v < (k == "reduction" ? 2 : 1))
        fail("." + k, "expected at least " + std::string(k == "reduction" ? "2" : "1") + ", got " +
                          std::to_string(v));
      (k == "min_steps" ? e.min_steps : e.reduction) = v;
    } else {
      fail("." + k, unknown_key_message(k, {"method", "min_steps", "reduction"}));
    }
  }
  return e;
}

SweepSpec sweep_load(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw ConfigError(path + ": sweep file not found" + (ec ? " (" + ec.message() + ")" : ""));
  YAML::Node doc;
  try {
    doc = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw ConfigError(path + ": invalid YAML: " + e.what());
  }
  if (!doc.IsMap()) throw ConfigError(path + ": expected a map of sweep keys at the top level");
  static const std::vector<std::string> keys = {"config", "scheme", "lr",           "seed",
                                                "set",    "jobs",   "gpus_per_run", "early_stop"};
  auto fail = [&](const std::string& key, const std::string& msg) -> void {
    throw ConfigError(path + ": " + key + ": " + msg);
  };
  // A list of scalars, from a YAML list or comma-separated text.
  auto items = [&](const std::string& key) {
    std::vector<std::string> out;
    const YAML::Node n = doc[key];
    if (n.IsSequence()) {
      for (const auto& e : n) {
        if (!e.IsScalar()) fail(key, "expected a list of values, got " + scalar_text(e) + " in it");
        out.push_back(e.Scalar());
      }
    } else if (n.IsScalar()) {
      std::stringstream ss(n.Scalar());
      for (std::string p; std::getline(ss, p, ',');) out.push_back(p);
    } else {
      fail(key, "expected a list or comma-separated text, got " + scalar_text(n));
    }
    if (out.empty()) fail(key, "empty list");
    return out;
  };
  SweepSpec spec;
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    const std::string k = it->first.Scalar();
    if (std::find(keys.begin(), keys.end(), k) != keys.end()) continue;
    fail(k, unknown_key_message(k, keys));
  }
  if (!doc["config"] || !doc["config"].IsScalar() || doc["config"].Scalar().empty())
    fail("config", "required: the base run config, relative to this file");
  spec.config = (std::filesystem::path(path).parent_path() / doc["config"].Scalar())
                    .lexically_normal()
                    .string();
  if (doc["scheme"])
    for (const auto& name : items("scheme")) {
      Scheme s{};
      const std::string err = parse_scalar(YAML::Node(name), s);
      if (!err.empty()) fail("scheme", err);
      spec.schemes.push_back(s);
    }
  if (doc["lr"]) {
    std::string text;
    if (doc["lr"].IsScalar())
      text = doc["lr"].Scalar();
    else
      for (const auto& v : items("lr")) text += (text.empty() ? "" : ",") + v;
    try {
      spec.lrs = parse_lr_list(text);
    } catch (const std::invalid_argument& e) {
      fail("lr", e.what());
    }
  }
  if (doc["seed"])
    for (const auto& v : items("seed")) {
      uint64_t seed = 0;
      const std::string err = parse_scalar(YAML::Node(v), seed);
      if (!err.empty()) fail("seed", err);
      spec.seeds.push_back(seed);
    }
  if (const YAML::Node n = doc["set"]) {
    if (n.IsMap()) {
      for (auto it = n.begin(); it != n.end(); ++it) {
        if (!it->second.IsScalar())
          fail("set." + it->first.Scalar(), "expected a value, got " + scalar_text(it->second));
        spec.overrides.push_back(it->first.Scalar() + "=" + it->second.Scalar());
      }
    } else if (n.IsSequence()) {
      for (const auto& e : n) {
        if (!e.IsScalar() || e.Scalar().find('=') == std::string::npos)
          fail("set", "expected section.key=value, got " + scalar_text(e));
        spec.overrides.push_back(e.Scalar());
      }
    } else {
      fail("set", "expected a map of section.key: value or a list of section.key=value");
    }
  }
  auto count = [&](const char* key, int& field) {
    if (!doc[key]) return;
    int64_t v = 0;
    const std::string err = parse_scalar(doc[key], v);
    if (!err.empty()) fail(key, err);
    if (v < 0 || v > 4096) fail(key, "expected 0 or more (0: automatic), got " + std::to_string(v));
    field = static_cast<int>(v);
  };
  count("jobs", spec.jobs);
  count("gpus_per_run", spec.gpus_per_run);
  if (doc["early_stop"]) spec.early_stop = early_stop_of(doc["early_stop"], path);
  return spec;
}

}  // namespace normlab
