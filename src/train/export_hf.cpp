#include "normlab/train/export_hf.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>

#include "normlab/config/config_io.h"
#include "normlab/data/tokenizer.h"
#include "normlab/train/export.h"
#include "normlab/util/file_io.h"
#include "normlab/util/safetensors.h"
#include "train/model_json.h"

namespace normlab {
namespace fs = std::filesystem;

namespace {

// The module name of modeling_normlab.py for a normlab parameter name.
std::string hf_name(const std::string& name) {
  return name == "head.weight" ? "lm_head.weight" : "model." + name;
}

void write_json(const fs::path& path, const nlohmann::json& j) {
  const std::string text = j.dump(2) + "\n";
  write_file_atomic(path.string(), [&](FileWriter& w) { w.write(text); });
}

// tokenizer.model and the tokenizer_config.json that loads it as transformers' TokenizersBackend
// (its SentencePiece conversion keeps the model's normalizer, so the ids are SentencePiece's).
// The bos token is </s>: normlab starts every prompt and task item with EOS, the document
// separator it trained on, and lm-eval and generate() take the bos the tokenizer adds.
void write_sentencepiece(const Tokenizer& tok, const std::string& path, int64_t max_length,
                         const fs::path& dir) {
  if (tok.piece(0) != "<unk>" || tok.piece(1) != "<s>" || tok.piece(2) != "</s>" ||
      tok.eos_id() != 2)
    throw CheckpointError(path + ": expected <unk>=0, <s>=1, </s>=2 (normlab tokenizer train)");
  fs::copy_file(path, dir / "tokenizer.model");
  write_json(dir / "tokenizer_config.json", {{"tokenizer_class", "TokenizersBackend"},
                                             {"bos_token", "</s>"},
                                             {"eos_token", "</s>"},
                                             {"unk_token", "<unk>"},
                                             {"pad_token", "</s>"},
                                             {"add_bos_token", true},
                                             {"add_eos_token", false},
                                             {"clean_up_tokenization_spaces", false},
                                             {"model_max_length", max_length}});
}

// A tokenizer.json as it is, and the tokenizer_config.json that loads it as transformers'
// TokenizersBackend, which encodes as the `tokenizers` library does, the file's post-processor
// included. The end-of-text token normlab separates documents with (and starts prompts with) is
// the eos, pad and bos token, as config.json's ids.
void write_tokenizer_json(const Tokenizer& tok, const std::string& path, int64_t max_length,
                          const fs::path& dir) {
  const std::string eos = tok.piece(tok.eos_id());
  fs::copy_file(path, dir / "tokenizer.json");
  write_json(dir / "tokenizer_config.json", {{"tokenizer_class", "TokenizersBackend"},
                                             {"bos_token", eos},
                                             {"eos_token", eos},
                                             {"pad_token", eos},
                                             {"clean_up_tokenization_spaces", false},
                                             {"model_max_length", max_length}});
}

}  // namespace

std::vector<std::string> hf_schemes() {
  const std::string text = hf_configuration_py();
  const size_t begin = text.find("\nSCHEMES = (");
  const size_t end = text.find(')', begin);
  if (begin == std::string::npos || end == std::string::npos)
    throw std::logic_error("configuration_normlab.py: no SCHEMES = (...) tuple");
  std::vector<std::string> names;
  for (size_t q = text.find('"', begin); q < end; q = text.find('"', q + 1)) {
    const size_t close = text.find('"', q + 1);
    names.push_back(text.substr(q + 1, close - q - 1));
    q = close;
  }
  return names;
}

std::string export_model_hf(const std::string& source, const std::string& out_dir,
                            const std::string& tokenizer, std::vector<std::string>* written,
                            OutputFiles* contract) {
  const LoadedModel m = load_model(source);
  const ModelConfig& model = m.model->config;
  const std::vector<std::string> supported = hf_schemes();
  const std::string scheme(enum_name(model.scheme));
  if (std::find(supported.begin(), supported.end(), scheme) == supported.end())
    throw ConfigError(source + ": model.scheme = " + scheme +
                      ": the Hugging Face model (modeling_normlab.py) does not implement it");
  const int64_t max_length = m.seq_len > 0 ? m.seq_len : 2048;
  const std::string tok_path = tokenizer.empty() ? m.tokenizer : tokenizer;
  if (!tok_path.empty() && !fs::exists(tok_path))
    throw FileError(tok_path + ": tokenizer not found (" +
                    (tokenizer.empty() ? "the data.tokenizer of " + m.from +
                                             "; a relative path "
                                             "counts from the working directory; give --tokenizer"
                                       : "--tokenizer") +
                    ")");
  std::optional<Tokenizer> tok;
  if (!tok_path.empty()) tok.emplace(tok_path);
  if (tok && tok->vocab_size() > model.vocab_size)
    throw CheckpointError(tok_path + ": the tokenizer's " + std::to_string(tok->vocab_size()) +
                          " pieces do not fit model.vocab_size " +
                          std::to_string(model.vocab_size));
  const int64_t eos = tok ? tok->eos_id() : 2;  // the end of text, which starts prompts too
  nlohmann::json config = model_keys_json(model);
  config.update({{"architectures", {"NormlabForCausalLM"}},
                 {"model_type", "normlab"},
                 {"auto_map",
                  {{"AutoConfig", "configuration_normlab.NormlabConfig"},
                   {"AutoModelForCausalLM", "modeling_normlab.NormlabForCausalLM"}}},
                 {"torch_dtype", "float32"},
                 {"bos_token_id", eos},
                 {"eos_token_id", eos},
                 {"pad_token_id", eos},
                 {"use_cache", false},
                 {"tie_word_embeddings", false},
                 {"max_position_embeddings", max_length},
                 {"normlab", {{"from", fs::absolute(m.from).string()}, {"step", m.step}}}});

  TensorDict weights;
  for (const auto& p : m.model->named_parameters())
    weights[hf_name(p.key())] = p.value().detach().to(torch::kFloat32).contiguous();

  StagedFiles folder(out_dir, contract);  // beside what the folder holds; files replaced one by one
  const fs::path tmp = folder.path();
  safetensors_save((tmp / "model.safetensors").string(), weights, {{"format", "pt"}});
  write_json(tmp / "config.json", config);
  write_json(
      tmp / "generation_config.json",
      {{"bos_token_id", eos}, {"eos_token_id", eos}, {"pad_token_id", eos}, {"use_cache", false}});
  for (const auto& [name, text] :
       {std::pair<const char*, const char*>{"modeling_normlab.py", hf_modeling_py()},
        {"configuration_normlab.py", hf_configuration_py()}}) {
    const std::string body = text;
    write_file_atomic((tmp / name).string(), [&](FileWriter& w) { w.write(body); });
  }
  if (tok && tok->is_tokenizer_json())
    write_tokenizer_json(*tok, tok_path, max_length, tmp);
  else if (tok)
    write_sentencepiece(*tok, tok_path, max_length, tmp);
  const std::vector<std::string> names = folder.commit();
  if (written) *written = names;
  return m.from;
}

}  // namespace normlab
