// The configured paths are compiled into this one small file, outside the unity batches and the
// precompiled header: the large translation units then hold no path of the checkout, and a
// second clone of the same commit finds them in the compiler cache (tests/CMakeLists.txt).
#include "test_paths.h"

namespace normlab::test {

std::string source_dir() { return NORMLAB_SOURCE_DIR; }

std::string data_path(const std::string& name) { return source_dir() + "/tests/data/" + name; }

std::string test_python() { return NORMLAB_TEST_PYTHON; }

}  // namespace normlab::test
