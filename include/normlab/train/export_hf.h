// Export for Hugging Face transformers: a folder that
//   AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True) and
//   AutoTokenizer.from_pretrained(DIR)
// load offline (docs/interop.md):
//   config.json               model_type "normlab", auto_map to the two files below, every
//                             model key, torch_dtype float32, the special token ids
//   generation_config.json    the special token ids (EOS stops generation)
//   model.safetensors         fp32 weights by the module names of modeling_normlab.py:
//                             "model." + normlab's name, the untied head as lm_head.weight
//   modeling_normlab.py,      the model in plain PyTorch, every scheme (src/train/hf/, compiled
//   configuration_normlab.py  into the library as text)
//   tokenizer.model,          the run's SentencePiece model, loaded by transformers'
//   tokenizer_config.json     TokenizersBackend; encoding prepends EOS, the document start
//                             normlab puts before prompts and task items
//   or tokenizer.json,        the run's tokenizer.json as it is, loaded by TokenizersBackend,
//   tokenizer_config.json     which encodes as the `tokenizers` library does (its
//                             post-processor included); its EOS is eos, bos and pad
#pragma once

#include <string>
#include <vector>

namespace normlab {

class OutputFiles;  // util/output_contract.h

/// `source` is anything load_model accepts: a run, checkpoint or normlab export folder.
/// Returns the folder the weights came from. The tokenizer files are written when the source
/// records a tokenizer (`tokenizer` overrides it; "" = the recorded one, none: no tokenizer
/// files). The files go into `out_dir` beside whatever it holds, each atomically, as
/// export_model's (export.h); `written`: the names of the files written; `contract`: as
/// export_model's.
std::string export_model_hf(const std::string& source, const std::string& out_dir,
                            const std::string& tokenizer = "",
                            std::vector<std::string>* written = nullptr,
                            OutputFiles* contract = nullptr);

/// The text of src/train/hf/modeling_normlab.py and configuration_normlab.py, as built in.
const char* hf_modeling_py();
const char* hf_configuration_py();

/// The schemes modeling_normlab.py implements: the SCHEMES tuple of configuration_normlab.py
/// (the file's own list, checked against the scheme table by the CTest scheme_lists).
/// export_model_hf refuses a model of any other scheme, naming it.
std::vector<std::string> hf_schemes();

}  // namespace normlab
