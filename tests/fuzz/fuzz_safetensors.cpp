// Fuzz target: the safetensors header reader (safetensors_format.h), as every checkpoint and
// export load runs it. A file is either rejected with SafetensorsError or described by a layout
// whose tensors tile the data section exactly; anything else (another exception, a crash, a
// sanitizer report, an allocation over the fuzzer's -malloc_limit_mb) is a finding.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "normlab/util/safetensors_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace normlab;
  const char* bytes = reinterpret_cast<const char*>(data);
  SafetensorsLayout layout;
  try {
    layout = safetensors_layout_parse(bytes, size, "<fuzz input>");
  } catch (const SafetensorsError&) {
    return 0;
  }
  if (layout.data_start < 8 || layout.data_start > size) std::abort();
  uint64_t covered = 0;
  std::vector<char> copy;
  for (const SafetensorsEntry& e : layout.tensors) {
    uint64_t numel = 1;
    for (int64_t d : e.shape) {
      if (d < 0) std::abort();
      numel *= static_cast<uint64_t>(d);
    }
    if (e.end < e.begin || numel * e.item_bytes != e.end - e.begin ||
        e.end > size - layout.data_start)
      std::abort();
    covered += e.end - e.begin;
    copy.assign(bytes + layout.data_start + e.begin,
                bytes + layout.data_start + e.end);  // what a load copies
  }
  if (covered != size - layout.data_start) std::abort();
  return 0;
}
