// A SentencePiece model (BPE or unigram) as a TokenizerBackend (tokenizer_backend.h).
// Internal to src/data.
#pragma once

#include <memory>
#include <string>

#include "data/tokenizer_backend.h"

namespace normlab {

/// The model serialized in `bytes`, the contents of the file `path`; a TokenizerError naming
/// `path` when it is not a SentencePiece model.
std::unique_ptr<TokenizerBackend> make_sentencepiece_tokenizer(const std::string& path,
                                                               const std::string& bytes);

}  // namespace normlab
