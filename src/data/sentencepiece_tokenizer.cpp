#include "data/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include "normlab/data/tokenizer.h"

namespace normlab {
namespace {

// ---- a minimal protobuf reader, for the few model options that decide splits_at_whitespace
// Field numbers from sentencepiece_model.proto: ModelProto.trainer_spec = 2,
// .normalizer_spec = 3; TrainerSpec.split_by_whitespace = 22 (default true),
// .treat_whitespace_as_suffix = 24 (false), .allow_whitespace_only_pieces = 26 (false);
// NormalizerSpec.add_dummy_prefix = 3 (true), .remove_extra_whitespaces = 4 (true),
// .escape_whitespaces = 5 (true).

struct ProtoReader {
  const unsigned char* p;
  const unsigned char* end;

  bool varint(uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64 && p < end; shift += 7) {
      const unsigned char b = *p++;
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  }

  // Calls on_field(number, wire_type, varint_value, bytes_begin, bytes_len) for each field.
  template <class F>
  bool each(F on_field) {
    while (p < end) {
      uint64_t key = 0, v = 0;
      if (!varint(key)) return false;
      const int wire = static_cast<int>(key & 7);
      const uint64_t field = key >> 3;
      if (wire == 0) {
        if (!varint(v)) return false;
        on_field(field, wire, v, nullptr, 0);
      } else if (wire == 2) {
        if (!varint(v) || v > static_cast<uint64_t>(end - p)) return false;
        on_field(field, wire, 0, p, static_cast<size_t>(v));
        p += v;
      } else if (wire == 1 || wire == 5) {
        const size_t n = wire == 1 ? 8 : 4;
        if (static_cast<size_t>(end - p) < n) return false;
        p += n;
      } else {
        return false;
      }
    }
    return true;
  }
};

bool proto_splits_at_whitespace(const std::string& model) {
  bool split_ws = true, suffix = false, ws_only = false, dummy = true, remove_extra = true,
       escape = true;
  ProtoReader top{reinterpret_cast<const unsigned char*>(model.data()),
                  reinterpret_cast<const unsigned char*>(model.data()) + model.size()};
  const bool ok =
      top.each([&](uint64_t field, int wire, uint64_t, const unsigned char* b, size_t n) {
        if (wire != 2 || (field != 2 && field != 3)) return;
        ProtoReader sub{b, b + n};
        sub.each([&](uint64_t f, int w, uint64_t v, const unsigned char*, size_t) {
          if (w != 0) return;
          if (field == 2 && f == 22) split_ws = v != 0;
          if (field == 2 && f == 24) suffix = v != 0;
          if (field == 2 && f == 26) ws_only = v != 0;
          if (field == 3 && f == 3) dummy = v != 0;
          if (field == 3 && f == 4) remove_extra = v != 0;
          if (field == 3 && f == 5) escape = v != 0;
        });
      });
  return ok && split_ws && !suffix && !ws_only && dummy && remove_extra && escape;
}

class SentencePieceTokenizer final : public TokenizerBackend {
 public:
  SentencePieceTokenizer(const std::string& path, const std::string& bytes) : path_(path) {
    const auto status = sp_.LoadFromSerializedProto(bytes);
    if (!status.ok())
      throw TokenizerError(path + ": not a SentencePiece model: " + status.ToString());
    splits_ = proto_splits_at_whitespace(bytes);
  }

  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int> ids;
    const auto status = sp_.Encode(text, &ids);
    if (!status.ok()) throw TokenizerError(path_ + ": encoding failed: " + status.ToString());
    return std::vector<int32_t>(ids.begin(), ids.end());
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    const std::vector<int> v(ids.begin(), ids.end());
    for (int id : v)
      if (id < 0 || id >= sp_.GetPieceSize())
        throw TokenizerError(path_ + ": token id " + std::to_string(id) +
                             " is outside the vocabulary of " + std::to_string(sp_.GetPieceSize()));
    std::string text;
    const auto status = sp_.Decode(v, &text);
    if (!status.ok()) throw TokenizerError(path_ + ": decoding failed: " + status.ToString());
    return text;
  }

  std::string piece(int32_t id) const override { return sp_.IdToPiece(id); }
  int64_t vocab_size() const override { return sp_.GetPieceSize(); }
  int32_t eos_id() const override { return sp_.eos_id(); }
  int32_t bos_id() const override { return sp_.bos_id(); }
  bool splits_at_whitespace() const override { return splits_; }
  bool is_tokenizer_json() const override { return false; }
  std::vector<int32_t> token_byte_lengths() const override;

 private:
  std::string path_;
  sentencepiece::SentencePieceProcessor sp_;
  bool splits_ = false;
};

std::vector<int32_t> SentencePieceTokenizer::token_byte_lengths() const {
  static const std::string marker = "\xE2\x96\x81";  // U+2581, SentencePiece's space
  std::vector<int32_t> out(static_cast<size_t>(vocab_size()));
  for (int32_t id = 0; id < static_cast<int32_t>(out.size()); ++id) {
    if (sp_.IsControl(id) || sp_.IsUnknown(id)) continue;
    if (sp_.IsByte(id)) {
      out[static_cast<size_t>(id)] = 1;
      continue;
    }
    const std::string p = sp_.IdToPiece(id);
    int32_t n = 0;
    for (size_t at = 0; at < p.size();) {
      ++n;
      at += p.compare(at, marker.size(), marker) == 0 ? marker.size() : 1;
    }
    out[static_cast<size_t>(id)] = n;
  }
  return out;
}

}  // namespace

std::unique_ptr<TokenizerBackend> make_sentencepiece_tokenizer(const std::string& path,
                                                               const std::string& bytes) {
  return std::make_unique<SentencePieceTokenizer>(path, bytes);
}

}  // namespace normlab
