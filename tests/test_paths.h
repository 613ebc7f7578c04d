// Where the tests find the checkout and the project's Python.
#pragma once

#include <string>

namespace normlab::test {

/// The source tree this build was configured from.
std::string source_dir();

/// The path of tests/data/<name>.
std::string data_path(const std::string& name);

/// The project's Python (the venv tools/setup.sh made), for the tests that run a reference.
std::string test_python();

}  // namespace normlab::test
