// The Python helpers the CLI runs when they are available (plots): tools/<script> from the
// source tree, else the installed copy, with the project's Python (NORMLAB_PYTHON overrides).
#pragma once

#include <string>
#include <vector>

namespace normlab::cli {

/// The project's Python: $NORMLAB_PYTHON, else the one the build used, else python3.
std::string project_python();

/// Runs `script` (a file name under tools/) with `args`; returns true when it succeeded.
/// On failure prints what was skipped and why (`what`, e.g. "plots"; `needs`, what the script
/// needs and how to get it), never throws.
bool run_python_tool(const std::string& script, const std::vector<std::string>& args,
                     const std::string& what,
                     const std::string& needs = "matplotlib: pip install matplotlib");

}  // namespace normlab::cli
