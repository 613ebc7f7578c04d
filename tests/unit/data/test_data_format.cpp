// The data formats as one enum and one table: every DataFormat has its name, its dtype check
// and its reader; a source's fields are checked by its format; the config layer's one encoder
// writes sources that its decoder reads back unchanged.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <set>
#include <string>
#include <vector>

#include "config/data_sources_yaml.h"
#include "data/token_format.h"
#include "normlab/data/source.h"

using namespace normlab;

TEST(DataFormat, EveryFormatHasOneNameAndARowInTheTable) {
  std::set<std::string> names;
  for (const DataFormat f : enum_values<DataFormat>()) {
    const std::string name(enum_name(f));
    EXPECT_TRUE(names.insert(name).second) << name;
    EXPECT_EQ(enum_from_name<DataFormat>(name, "format"), f);
    const TokenFormat& row = token_format(f);
    EXPECT_NE(row.open, nullptr) << name;
    ASSERT_NE(row.dtype_error, nullptr) << name;
    EXPECT_EQ(row.dtype_error(""), "") << name << ": a dtype left out is always fine";
  }
  EXPECT_EQ(names, (std::set<std::string>{"shards", "tokens", "megatron"}));
  EXPECT_THROW(enum_from_name<DataFormat>("parquet", "format"), std::invalid_argument);
}

TEST(DataFormat, EachFormatTakesItsOwnDtypes) {
  const auto error = [](DataFormat f, const std::string& dtype) {
    return source_error(DataSource("x", f, dtype));
  };
  for (const char* d : {"uint16", "uint32", "int32", "int64"})
    EXPECT_EQ(error(DataFormat::Tokens, d), "") << d;
  for (const char* d : {"uint16", "int32", "int64"}) EXPECT_EQ(error(DataFormat::Megatron, d), "");
  EXPECT_NE(error(DataFormat::Megatron, "uint32").find("dtype: a Megatron dataset"),
            std::string::npos);
  EXPECT_NE(error(DataFormat::Tokens, "float32").find("dtype: token arrays hold"),
            std::string::npos);
  EXPECT_NE(error(DataFormat::Shards, "uint16").find("dtype: a shard folder records its own"),
            std::string::npos);
  EXPECT_EQ(error(DataFormat::Shards, ""), "");
  EXPECT_NE(source_error(DataSource("")).find("path: empty"), std::string::npos);
  EXPECT_NE(source_error(DataSource("x", DataFormat::Tokens, "", -2)).find("eos:"),
            std::string::npos);
  EXPECT_NE(source_error(DataSource("x", DataFormat::Tokens, "", 0, 0.0)).find("weight:"),
            std::string::npos);
}

TEST(DataFormat, OneEncoderWritesWhatTheDecoderReadsBack) {
  const std::vector<std::vector<DataSource>> cases = {
      {DataSource("data/shards")},
      {DataSource("a b/train.bin", DataFormat::Tokens, "uint32", 50256, 1.0, false)},
      {DataSource("web", DataFormat::Shards, "", -1, 0.7),
       DataSource("code_text_document", DataFormat::Megatron, "int32", 0, 0.3)},
  };
  for (const auto& sources : cases) {
    const std::string text = config_yaml::sources_text(sources);
    std::vector<DataSource> back;
    const config_yaml::SourcesError e = config_yaml::decode_sources(YAML::Load(text), back);
    ASSERT_EQ(e.message, "") << text;
    ASSERT_EQ(back.size(), sources.size()) << text;
    for (size_t i = 0; i < back.size(); ++i) {
      EXPECT_EQ(back[i].path, sources[i].path) << text;
      EXPECT_EQ(back[i].format, sources[i].format) << text;
      EXPECT_EQ(back[i].dtype, sources[i].dtype) << text;
      EXPECT_EQ(back[i].eos, sources[i].eos) << text;
      EXPECT_EQ(back[i].weight, sources[i].weight) << text;
      EXPECT_EQ(back[i].verify, sources[i].verify) << text;
    }
  }
  EXPECT_EQ(config_yaml::sources_text({DataSource("data/shards")}), "data/shards");
  EXPECT_EQ(config_yaml::sources_text({}), "");
  EXPECT_NE(config_yaml::sources_text({DataSource("t.bin", DataFormat::Tokens, "uint16")})
                .find("format: tokens"),
            std::string::npos);
}
