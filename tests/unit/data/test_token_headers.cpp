// The headers of token files checked on bytes built here: Megatron's .idx and NumPy's .npy,
// each refused in one line that names what is wrong.
#include <string>

#include "normlab/data/megatron_index.h"
#include "normlab/data/npy.h"
#include "normlab/util/error.h"
#include "support.h"

using namespace normlab;

namespace {

// The header checks of a Megatron index, on bytes built here.
TEST(MegatronIndex, TruncatedOrForeignIndexesAreRefused) {
  std::string idx("MMIDIDX\0\0", 9);
  auto u64 = [&](uint64_t v) { idx.append(reinterpret_cast<const char*>(&v), 8); };
  u64(1);
  idx.push_back(static_cast<char>(8));
  u64(1);  // one sequence
  u64(2);  // document index [0, 1]
  const int32_t len = 3;
  idx.append(reinterpret_cast<const char*>(&len), 4);
  u64(0);
  u64(0);
  u64(1);
  const MegatronIndex ok = megatron_index_parse(idx.data(), idx.size(), "x.idx", 6, "x.bin");
  EXPECT_EQ(ok.tokens, 3u);
  EXPECT_EQ(ok.documents, 1u);
  EXPECT_THROW(megatron_index_parse(idx.data(), idx.size() - 1, "x.idx", 6, "x.bin"), DataError);
  std::string v2 = idx;
  v2[9] = 2;
  EXPECT_NE(test::error_message([&] {
              megatron_index_parse(v2.data(), v2.size(), "x.idx", 6, "x.bin");
            }).find("version 2"),
            std::string::npos);
  std::string f32 = idx;
  f32[17] = 7;
  EXPECT_NE(test::error_message([&] {
              megatron_index_parse(f32.data(), f32.size(), "x.idx", 6, "x.bin");
            }).find("float32"),
            std::string::npos);
  EXPECT_THROW(megatron_index_parse("NOTANIDX", 8, "x.idx", 6, "x.bin"), DataError);
}

// The header checks of a .npy file, on bytes built here.
TEST(NpyHeader, VersionsShapesAndHostileHeadersAreCheckedByName) {
  auto npy = [](int major, const std::string& dict, size_t payload) {
    std::string h = dict;
    const size_t pre = major == 1 ? 10 : 12;
    while ((pre + h.size() + 1) % 64 != 0) h += ' ';
    h += '\n';
    std::string f = std::string("\x93NUMPY", 6) + static_cast<char>(major) + '\0';
    const uint32_t len = static_cast<uint32_t>(h.size());
    f.append(reinterpret_cast<const char*>(&len), major == 1 ? 2 : 4);
    return f + h + std::string(payload, '\0');
  };
  const std::string ok = npy(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (3, 2), }", 24);
  const NpyHeader h = npy_parse_header(ok.data(), ok.size(), "x.npy");
  EXPECT_EQ(h.type, TokenType::I32);
  EXPECT_EQ(h.elements, 6u);
  EXPECT_EQ(h.data_offset, ok.size() - 24);
  const std::string py2 =
      npy(2, "{\"descr\": \"<u2\", \"shape\": (5L,), \"fortran_order\": True}", 10);
  EXPECT_EQ(npy_parse_header(py2.data(), py2.size(), "x.npy").elements, 5u);  // 1-d: any order
  const std::string scalar = npy(3, "{'descr': '<i8', 'fortran_order': False, 'shape': ()}", 8);
  EXPECT_EQ(npy_parse_header(scalar.data(), scalar.size(), "x.npy").elements, 1u);
  auto error_of = [](const std::string& f) {
    return test::error_message([&] { npy_parse_header(f.data(), f.size(), "x.npy"); });
  };
  const std::map<std::string, std::string> hostile = {
      {npy(4, "{'descr': '<u2', 'fortran_order': False, 'shape': (1,)}", 2), "version 4.0"},
      {npy(1, "{'descr': '<u2', 'shape': (1,)}", 2), "no 'fortran_order'"},
      {npy(1, "{'descr': '<u2', 'descr': '<u2', 'fortran_order': False, 'shape': (1,)}", 2),
       "appears twice"},
      {npy(1, "{'descr': '<u2', 'fortran_order': False, 'shape': (1,), 'x': 1}", 2),
       "keys other than"},
      {npy(1, "{'descr': '<u2', 'fortran_order': False, 'shape': 1}", 2), "not a tuple"},
      {npy(1, "{'descr': '<u2', 'fortran_order': False, 'shape': (-1,)}", 2), "non-negative"},
      {npy(1, "{'descr': '<u2', 'fortran_order': Maybe, 'shape': (1,)}", 2), "not True or False"},
      {npy(1, "{'descr': '<u2', 'fortran_order': False, 'shape': (99999999999999999999,)}", 2),
       "does not fit 64 bits"},
      {npy(1, "{'descr': '<i8', 'fortran_order': False, 'shape': (4294967296, 4294967296)}", 2),
       "shape too large"},
      {npy(1, "{'descr': '<u2', 'fortran_order': False, 'shape': (1,)", 2), "not closed"},
      {npy(1, "{'descr': [('a', '<u2')], 'fortran_order': False, 'shape': (1,)}", 2),
       "expected a value"},
      {npy(1, "{'descr': '<u2', 'fortran_order': False, 'shape': (2,)}", 2), "(truncated)"},
      {npy(1, "{'descr': '<u2', 'fortran_order': False, 'shape': (1,)}", 4),
       "(bytes after the array)"},
      {std::string("\x93NUMPY\x01\x00\xff\xff", 10), "announces 65535 bytes"},
      {std::string("\x93NUMPY\x01", 7), "cut inside its header"},
  };
  for (const auto& [file, phrase] : hostile) {
    const std::string e = error_of(file);
    EXPECT_NE(e.find("x.npy: "), std::string::npos) << e;
    EXPECT_NE(e.find(phrase), std::string::npos) << phrase << " | " << e;
  }
  std::string unaligned = std::string("\x93NUMPY\x01\x00", 8);
  const std::string dict = "{'descr': '<i8', 'fortran_order': False, 'shape': (1,)}\n";
  const uint16_t len = static_cast<uint16_t>(dict.size());
  unaligned.append(reinterpret_cast<const char*>(&len), 2);
  unaligned += dict + std::string(8, '\0');
  EXPECT_NE(error_of(unaligned).find("not aligned"), std::string::npos) << error_of(unaligned);
}

}  // namespace
