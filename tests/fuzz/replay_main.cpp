// The fuzz targets without libFuzzer: runs every file of the given folders (or the given files)
// through one target, so the seed corpora and every input a fuzzer ever found stay regression
// tests of the ordinary build (CTest label unit). Usage: normlab_fuzz_replay TARGET PATH...
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

extern "C" int normlab_fuzz_config(const uint8_t* data, size_t size);
extern "C" int normlab_fuzz_shard(const uint8_t* data, size_t size);
extern "C" int normlab_fuzz_safetensors(const uint8_t* data, size_t size);
extern "C" int normlab_fuzz_weight_map(const uint8_t* data, size_t size);
extern "C" int normlab_fuzz_tokenizer(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s config|shard|safetensors|weight_map|tokenizer PATH...\n",
                 argv[0]);
    return 2;
  }
  const std::string target = argv[1];
  int (*run)(const uint8_t*, size_t) = target == "config"        ? normlab_fuzz_config
                                       : target == "shard"       ? normlab_fuzz_shard
                                       : target == "safetensors" ? normlab_fuzz_safetensors
                                       : target == "weight_map"  ? normlab_fuzz_weight_map
                                       : target == "tokenizer"   ? normlab_fuzz_tokenizer
                                                                 : nullptr;
  if (!run) {
    std::fprintf(stderr,
                 "unknown fuzz target '%s' (config, shard, safetensors, weight_map, tokenizer)\n",
                 target.c_str());
    return 2;
  }
  std::set<fs::path> files;
  for (int i = 2; i < argc; ++i) {
    if (fs::is_directory(argv[i])) {
      for (const auto& e : fs::directory_iterator(argv[i]))
        if (e.is_regular_file()) files.insert(e.path());
    } else {
      files.insert(argv[i]);
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "no inputs\n");
    return 2;
  }
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                  std::istreambuf_iterator<char>());
    run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());  // aborts on a finding
  }
  std::printf("%s: %zu inputs replayed, no finding\n", target.c_str(), files.size());
  return 0;
}
