// Configuration: YAML files with bases, --set overrides, strict errors, the resolved dump,
// and docs/config.md kept in sync with the schema.
#include <gmock/gmock.h>

#include <fstream>
#include <sstream>

#include "normlab/config/config_io.h"
#include "normlab/util/file_io.h"
#include "support.h"

using namespace normlab;

namespace {

void config_write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

std::string config_error_of(const std::string& path,
                            const std::vector<std::string>& overrides = {}) {
  try {
    config_load(path, overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Config, DefaultsAreValid) {
  const RunConfig c = config_load("");
  EXPECT_EQ(c.model.scheme, Scheme::PreNorm);
  EXPECT_EQ(c.model.d_model, 2048);
  EXPECT_DOUBLE_EQ(c.optimizer.beta2, 0.95);
}

TEST(Config, BaseFilesMergeAndOverridesApplyInOrder) {
  test::ScratchDir dir("cfg");
  config_write(dir / "base.yaml",
               "model:\n  d_model: 64\n  n_heads: 4\n  n_layers: 3\noptimizer:\n  lr: 0.01\n");
  config_write(dir / "run.yaml",
               "base: base.yaml\nmodel:\n  n_layers: 5\n  siamese:\n    input_norm: false\n");
  const RunConfig c = config_load(
      dir / "run.yaml", {"optimizer.lr=2e-3", "model.scheme=siamese", "optimizer.lr=4e-4"});
  EXPECT_EQ(c.model.d_model, 64);  // from the base
  EXPECT_EQ(c.model.n_layers, 5);  // the file over its base
  EXPECT_FALSE(c.model.siamese.input_norm);
  EXPECT_TRUE(c.model.siamese.depth_scale);  // untouched default inside a set section
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 4e-4);    // the last override wins
  EXPECT_EQ(c.model.scheme, Scheme::Siamese);
}

TEST(Config, OptionalKeysTakeNullForTheirDefault) {
  RunConfig c = config_load("", {"model.deep_norm_alpha=1.5", "model.n_layers=8"});
  EXPECT_DOUBLE_EQ(c.model.deep_alpha(), 1.5);
  c = config_load("", {"model.deep_norm_alpha=null", "model.n_layers=8"});
  EXPECT_DOUBLE_EQ(c.model.deep_alpha(), std::pow(16.0, 0.25));
}

TEST(Config, ResolvedYamlReloadsToTheSameConfig) {
  test::ScratchDir dir("cfg");
  const RunConfig a =
      config_load("", {"model.scheme=siamese_hybrid", "optimizer.lr=0.0007",
                       "model.siamese.output_fusion=paper", "data.train=a b/c",
                       "model.mix_ln_post_layers=2", "train.seed=18446744073709551615"});
  const std::string text = config_to_yaml(a);
  config_write(dir / "resolved.yaml", text);
  const RunConfig b = config_load(dir / "resolved.yaml");
  EXPECT_EQ(config_to_yaml(b), text);
  EXPECT_DOUBLE_EQ(b.optimizer.lr, 0.0007);
  ASSERT_EQ(b.data.train.size(), 1u);
  EXPECT_EQ(b.data.train[0].path, "a b/c");
  EXPECT_EQ(b.train.seed, 18446744073709551615ull);
  EXPECT_NE(text.find("rope_theta: 10000.0"), std::string::npos) << text;
}

TEST(Config, RejectsBadInputNamingTheSourceAndKey) {
  test::ScratchDir dir("cfg");
  config_write(dir / "typo.yaml", "model:\n  d_modle: 64\n");
  config_write(dir / "section.yaml", "modle:\n  d_model: 64\n");
  config_write(dir / "type.yaml", "model:\n  n_layers: three\n");
  config_write(dir / "bool.yaml", "model:\n  tie_embeddings: maybe\n");
  config_write(dir / "float_int.yaml", "model:\n  n_layers: 2.5\n");
  config_write(dir / "scalar_section.yaml", "model: 3\n");
  config_write(dir / "enum.yaml", "model:\n  norm_type: batchnorm\n");
  config_write(dir / "invalid.yaml", "model:\n  d_model: 100\n  n_heads: 16\n");
  config_write(dir / "yaml.yaml", "model: [unclosed\n");
  config_write(dir / "cycle.yaml", "base: cycle.yaml\n");
  config_write(dir / "batch.yaml", "train:\n  global_batch: 10\n  micro_batch: 4\n");
  config_write(dir / "lr.yaml", "optimizer:\n  lr: -1\n");
  config_write(dir / "from_base.yaml", "base: typo.yaml\n");
  struct Case {
    std::string file;
    std::vector<std::string> overrides;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"typo.yaml", {}, "typo.yaml: model.d_modle: unknown key (did you mean 'model.d_model'?)"},
      {"section.yaml", {}, "section.yaml: modle: unknown key (did you mean 'model'?)"},
      {"type.yaml", {}, "type.yaml: model.n_layers: expected an integer, got 'three'"},
      {"bool.yaml", {}, "model.tie_embeddings: expected true or false, got 'maybe'"},
      {"float_int.yaml", {}, "model.n_layers: expected an integer, got '2.5'"},
      {"scalar_section.yaml", {}, "model: expected a section"},
      {"enum.yaml", {}, "model.norm_type: unknown value 'batchnorm' (valid: rmsnorm, layernorm)"},
      {"invalid.yaml", {}, "model.d_model = 100: must be divisible by model.n_heads (16)"},
      {"yaml.yaml", {}, "yaml.yaml: invalid YAML"},
      {"cycle.yaml", {}, "cycle?"},
      {"batch.yaml",
       {},
       "train.global_batch = 10: must be a positive multiple of train.micro_batch (4)"},
      {"lr.yaml", {}, "optimizer.lr = -1: must be positive"},
      {"from_base.yaml", {}, "typo.yaml: model.d_modle: unknown key"},
      {"missing.yaml", {}, "missing.yaml: config file not found"},
      {"", {"model.n_heads=x"}, "--set model.n_heads=x: model.n_heads: expected an integer"},
      {"", {"model"}, "--set model: expected section.key=value"},
      {"", {"model.hyper.n=3"}, "model.hyper.n = 3: must be 1, 2, 4 or 8"},
      {"",
       {"model.hyper.variant=dhc"},
       "model.hyper.variant: unknown value 'dhc' (valid: hc, mhc)"},
      {"",
       {"model.hyper.out_std_mult=2"},
       "model.hyper.out_std_mult: unknown value '2' (valid: 1, sqrt_n)"},
      {"", {"model.siamese.hyper.n=3"}, "model.siamese.hyper.n = 3: must be 0 (off), 1, 2, 4 or 8"},
      {"",
       {"model.siamese.hyper.variant=dhc"},
       "model.siamese.hyper.variant: unknown value 'dhc' (valid: hc, mhc)"},
      // A section only some schemes read, set on another scheme (its defaults pass).
      {"",
       {"model.scheme=pre_norm", "model.hyper.n=4"},
       "model.hyper.n = 4: read only by model.scheme = hyper, not by model.scheme = pre_norm"},
      {"",
       {"model.scheme=siamese_hybrid", "model.hyper.dynamic=false"},
       "model.hyper.dynamic = false: read only by model.scheme = hyper, not by model.scheme = "
       "siamese_hybrid"},
      {"",
       {"model.scheme=hyper", "model.siamese.hyper.n=2"},
       "model.siamese.hyper.n = 2: read only by model.scheme = siamese or siamese_hybrid, not by "
       "model.scheme = hyper"},
      {"",
       {"model.scheme=pre_norm", "model.siamese.hyper.variant=mhc"},
       "model.siamese.hyper.variant = mhc: read only by model.scheme = siamese or "
       "siamese_hybrid"},
      {"",
       {"train.stepz=3"},
       "--set train.stepz=3: train.stepz: unknown key (did you mean 'train.steps'?)"},
      {"",
       {"optimizer.lr.x=3"},
       "--set optimizer.lr.x=3: optimizer.lr: expected a number, got a map"},
      {"",
       {"zz.yy=1"},
       "zz: unknown key (valid keys here: model, data, optimizer, scheduler, train, eval, "
       "diagnostics, checkpoint, logging, distributed)"},
  };
  for (const Case& c : cases) {
    const std::string err = config_error_of(c.file.empty() ? "" : dir / c.file, c.overrides);
    EXPECT_NE(err.find(c.expect), std::string::npos) << c.file << ": got '" << err << "'";
  }
}

TEST(Config, SchemeSectionsLoadWithTheirSchemesAndAsDefaultsElsewhere) {
  // model.hyper with hyper, model.siamese.hyper with siamese and siamese_hybrid.
  EXPECT_EQ(config_load("", {"model.scheme=hyper", "model.hyper.n=4"}).model.hyper.n, 4);
  for (const char* s : {"siamese", "siamese_hybrid"})
    EXPECT_EQ(config_load("", {std::string("model.scheme=") + s, "model.siamese.hyper.n=2"})
                  .model.siamese.hyper.n,
              2);
  // The defaults, as every resolved config.yaml writes them, load with any scheme, and so does
  // that config.yaml.
  const RunConfig pre = config_load("", {"model.scheme=pre_norm", "model.hyper.n=2"});
  EXPECT_EQ(config_to_yaml(pre), config_to_yaml(config_load("", {"model.scheme=pre_norm"})));
}

// The Hyper-Connections paper scales the init std of the output projections by sqrt(n)
// (docs/schemes.md); SiameseNorm x HC keeps SiameseNorm's init; the shipped configs pin theirs.
TEST(Config, HyperOutputInitDefaultsToThePapersSqrtN) {
  const RunConfig c = config_load("", {"model.scheme=hyper"});
  EXPECT_EQ(c.model.hyper.out_std_mult, HyperOutStd::SqrtN);
  EXPECT_EQ(config_load("", {"model.scheme=siamese_hybrid", "model.siamese.hyper.n=2"})
                .model.siamese.hyper.out_std_mult,
            HyperOutStd::One);
  EXPECT_EQ(config_load("", {"model.scheme=hyper", "model.hyper.out_std_mult=1"})
                .model.hyper.out_std_mult,
            HyperOutStd::One);
}

TEST(Config, ShippedConfigsLoad) {
  for (const char* f : {"configs/tiny/lm.yaml", "configs/small/lm.yaml", "configs/1.3b/base.yaml"})
    EXPECT_NO_THROW(config_load(test::source_dir() + "/" + f)) << f;
  for (Scheme s : enum_values<Scheme>()) {
    const RunConfig c =
        config_load(test::source_dir() + "/configs/1.3b/" + std::string(enum_name(s)) + ".yaml");
    EXPECT_EQ(c.model.scheme, s);
    EXPECT_EQ(c.model.d_model, 2048);
    EXPECT_EQ(c.scheduler.warmup_steps, 2000);
  }
  // SiameseNorm x Hyper-Connections: off by default, 2xDHC on Y in its configs.
  EXPECT_FALSE(config_load("").model.siamese.hyper.enabled());
  for (const char* f :
       {"configs/1.3b/siamese_hybrid_hyper.yaml", "configs/small/siamese_hybrid_hyper.yaml",
        "configs/tiny/siamese_hybrid_hyper.yaml"}) {
    const ModelConfig m = config_load(test::source_dir() + "/" + f).model;
    EXPECT_EQ(m.scheme, Scheme::SiameseHybrid) << f;
    EXPECT_EQ(m.siamese.hyper.n, 2) << f;
    EXPECT_TRUE(m.siamese.hyper.dynamic) << f;
    EXPECT_EQ(m.siamese.hyper.variant, HyperVariant::Hc) << f;
  }
}

// docs/config.md embeds the generated key table verbatim: a key added to the schema without
// its documentation fails here (regenerate with `normlab config --reference`).
TEST(Config, DocsListEveryKeyWithItsDefault) {
  const std::string docs = read_file(test::source_dir() + "/docs/config.md");
  EXPECT_NE(docs.find(config_reference_markdown()), std::string::npos)
      << "docs/config.md is out of date; its table must be:\n"
      << config_reference_markdown();
}

// train.precision = fp64 carries the FSDP traffic in fp64 too: the FSDP dtypes cannot name fp64
// themselves, nor bf16 beside an fp64 run.
TEST(Config, Float64PrecisionAndTheFsdpDtypes) {
  EXPECT_EQ(config_load("", {"train.precision=fp64"}).train.precision, Precision::Fp64);
  EXPECT_THAT(config_error_of("", {"distributed.param_dtype=fp64"}),
              testing::HasSubstr("distributed.param_dtype = fp64: must be auto, bf16 or fp32"));
  EXPECT_THAT(config_error_of("", {"train.precision=fp64", "distributed.reduce_dtype=bf16"}),
              testing::HasSubstr("distributed.reduce_dtype = bf16: cannot be bf16 with "
                                 "train.precision = fp64"));
  EXPECT_EQ(config_error_of("", {"train.precision=fp64", "distributed.param_dtype=fp32"}), "");
}

// Every size has an upper bound, checked before anything is built: beyond it, the key, the
// value and the bound.
TEST(Config, ModelSizesAreBoundedBeforeAnythingIsAllocated) {
  const std::map<std::string, std::string> bounds = {
      {"model.vocab_size=2147483648", "model.vocab_size = 2147483648: must lie in [1, 2^31 - 1]"},
      {"model.d_model=1048577", "model.d_model = 1048577: must lie in [1, 2^20]"},
      {"model.n_layers=16385", "model.n_layers = 16385: must lie in [1, 16384]"},
      {"model.d_ff=16777217", "model.d_ff = 16777217: must lie in [1, 2^24]"},
      {"model.moe.n_experts=65537", "model.moe.n_experts = 65537: must be 0 (dense) or lie in"},
  };
  for (const auto& [set, error] : bounds)
    EXPECT_THAT(config_error_of("", {set}), testing::HasSubstr(error));
  EXPECT_THAT(
      config_error_of(
          "", {"model.moe.n_experts=4", "model.moe.top_k=1", "model.moe.d_expert=16777217"}),
      testing::HasSubstr("model.moe.d_expert = 16777217: must be 0 (= model.d_ff) or lie in "
                         "[1, 2^24]"));
  // The bounds themselves load (whether such a model fits the machine is checked later).
  for (const char* at :
       {"model.vocab_size=2147483647", "model.n_layers=16384", "model.d_ff=16777216"})
    EXPECT_EQ(config_error_of("", {at}), "") << at;
}

// Full-width q/k norms exclude the per-head q/k/v norms, whether asked for or implied by the
// scheme; the schemes without per-head norms take them.
TEST(Config, FullQkNormExcludesPerHeadQkvNorms) {
  EXPECT_EQ(config_load("", {"model.qk_norm=full"}).model.qk_norm, QkNorm::Full);
  EXPECT_EQ(config_error_of("", {"model.qk_norm=full", "model.scheme=siamese"}), "");
  EXPECT_THAT(config_error_of("", {"model.qk_norm=full", "model.qkv_norm=true"}),
              testing::HasSubstr("model.qk_norm = full: cannot be combined with model.qkv_norm"));
  EXPECT_THAT(config_error_of("", {"model.qk_norm=full", "model.scheme=hybrid_norm"}),
              testing::HasSubstr("model.qk_norm = full: cannot be combined with model.scheme = "
                                 "hybrid_norm, whose attention has per-head q/k/v norms"));
  EXPECT_THAT(config_error_of("", {"model.qk_norm=half"}), testing::HasSubstr("model.qk_norm"));
}

// model.moe.dispatch = grouped is checked against the run's precision and the widths when the
// config loads (the grouped GEMM: float32 or bfloat16 rows of a multiple of 16 bytes).
TEST(Config, GroupedMoeDispatchIsCheckedAgainstPrecisionAndWidths) {
  const std::vector<std::string> moe = {"model.moe.n_experts=4", "model.moe.top_k=2",
                                        "model.moe.dispatch=grouped", "model.moe.d_expert=20"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), moe.begin(), moe.end());
    return more;
  };
  EXPECT_EQ(config_error_of("", with({"train.precision=fp32"})), "");
  EXPECT_THAT(config_error_of("", with({"train.precision=fp64"})),
              testing::HasSubstr("model.moe.dispatch = grouped: the grouped GEMM takes float32 or "
                                 "bfloat16, not train.precision = fp64"));
  for (const char* p : {"train.precision=bf16", "train.precision=auto"})
    EXPECT_THAT(config_error_of("", with({p})),
                testing::HasSubstr("(8 bfloat16 values, train.precision = " +
                                   std::string(p).substr(16) + "); model.moe.d_expert is 20"))
        << p;
  EXPECT_THAT(config_error_of("", with({"train.precision=fp32", "model.moe.d_expert=18"})),
              testing::HasSubstr("(4 float32 values, train.precision = fp32); model.moe.d_expert "
                                 "is 18"));
  // loop and auto take any precision and width; a dense model ignores the dispatch.
  EXPECT_EQ(config_error_of("", with({"train.precision=fp64", "model.moe.dispatch=auto"})), "");
  EXPECT_EQ(config_error_of(
                "", with({"train.precision=fp64", "model.moe.n_experts=0", "model.moe.top_k=1"})),
            "");
}

// Hybrid sharding's group size and the precision policy's list (the divisibility by the number
// of ranks is the trainer's: test_hsdp.cpp, tests/distributed/hsdp.sh).
TEST(Config, ShardSizeAndKeepFp32) {
  EXPECT_EQ(config_load("", {"distributed.shard_size=8"}).distributed.shard_size, 8);
  EXPECT_THAT(config_error_of("", {"distributed.shard_size=-1"}),
              testing::HasSubstr("distributed.shard_size = -1: must be at least 0"));
  EXPECT_EQ(config_load("", {}).distributed.keep_fp32, "norms,scheme,embeddings");
  EXPECT_EQ(config_error_of("", {"distributed.keep_fp32=norms,scheme"}), "");
  EXPECT_EQ(config_error_of("", {"distributed.keep_fp32=none"}), "");
  EXPECT_THAT(config_error_of("", {"distributed.keep_fp32=norms,gains"}),
              testing::HasSubstr("distributed.keep_fp32 = norms,gains: 'gains' is not one of "
                                 "norms, scheme, embeddings"));
}

// data.train as a folder, one source or a weighted list; the resolved YAML reads back the
// same; bad sources name the file and the key.
TEST(Config, DataSourcesAndMixtures) {
  test::ScratchDir dir("cfg_sources");
  config_write(dir / "mix.yaml",
               "data:\n  train:\n    - {path: a.bin, format: tokens, dtype: uint16, eos: 0, "
               "weight: 0.7}\n    - {path: corpus/mega, format: megatron, weight: 0.3}\n  val: "
               "{path: v.bin, format: tokens, dtype: uint32, verify: false}\n");
  const RunConfig c = config_load(dir / "mix.yaml");
  ASSERT_EQ(c.data.train.size(), 2u);
  EXPECT_EQ(c.data.train[0].format, DataFormat::Tokens);
  EXPECT_EQ(c.data.train[0].eos, 0);
  EXPECT_DOUBLE_EQ(c.data.train[1].weight, 0.3);
  EXPECT_EQ(c.data.train[1].format, DataFormat::Megatron);
  ASSERT_EQ(c.data.val.size(), 1u);
  EXPECT_FALSE(c.data.val[0].verify);
  const std::string text = config_to_yaml(c);
  config_write(dir / "resolved.yaml", text);
  const RunConfig back = config_load(dir / "resolved.yaml");
  EXPECT_EQ(config_to_yaml(back), text);
  EXPECT_EQ(back.data.train[1].path, "corpus/mega");
  EXPECT_EQ(config_flatten(back), config_flatten(c));
  // A plain folder stays a plain string.
  EXPECT_NE(config_to_yaml(config_load("", {"data.train=shards"})).find("train: \"shards\""),
            std::string::npos);

  config_write(dir / "empty_weight.yaml",
               "data:\n  train:\n    - {path: a.bin, format: tokens, dtype: uint16}\n    - "
               "{path: b.bin, format: tokens, dtype: uint16, weight: }\n");
  EXPECT_THAT(config_error_of(dir / "empty_weight.yaml"),
              testing::HasSubstr("empty_weight.yaml: data.train[1].weight: empty"));
  EXPECT_THAT(config_error_of("", {"data.train={path: a.bin, format: tokens, dtype: float32}"}),
              testing::HasSubstr("data.train.dtype: token arrays hold uint16, uint32, int32 or "
                                 "int64, got 'float32'"));
  EXPECT_THAT(config_error_of("", {"data.train=[{path: a, weight: -1}]"}),
              testing::HasSubstr("--set data.train=[{path: a, weight: -1}]: data.train[0].weight: "
                                 "expected a positive number"));
  EXPECT_THAT(config_error_of("", {"data.train={path: a, wieght: 2}"}),
              testing::HasSubstr("data.train.wieght: unknown key (did you mean 'weight'?)"));
  EXPECT_THAT(config_error_of("", {"data.train={path: a, format: parquet}"}),
              testing::HasSubstr("format: unknown value 'parquet'"));
  EXPECT_THAT(config_error_of("", {"data.val=[a, b]"}), testing::HasSubstr("data.val"));
  EXPECT_THAT(config_error_of("", {"data.train=[]"}), testing::HasSubstr("an empty list"));
}
