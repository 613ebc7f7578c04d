#include "python_tool.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

namespace normlab::cli {
namespace {

std::string shell_quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace

std::string project_python() {
  const char* env_python = std::getenv("NORMLAB_PYTHON");
  std::string python = env_python && *env_python ? env_python : NORMLAB_DEFAULT_PYTHON;
  return python.empty() ? "python3" : python;
}

bool run_python_tool(const std::string& script, const std::vector<std::string>& args,
                     const std::string& what, const std::string& needs) {
  const std::string python = project_python();
  std::filesystem::path path = std::filesystem::path(NORMLAB_TOOLS_DIR) / script;
  if (!std::filesystem::exists(path))
    path = std::filesystem::path(NORMLAB_INSTALLED_TOOLS_DIR) / script;
  if (!std::filesystem::exists(path)) {
    std::cout << what << " skipped: " << script << " not found\n";
    return false;
  }
  std::cout.flush();  // our output first, then the script's
  std::fflush(stdout);
  std::string cmd = shell_quoted(python) + " " + shell_quoted(path.string());
  for (const auto& a : args) cmd += " " + shell_quoted(a);
  if (std::system(cmd.c_str()) != 0) {
    std::cout << what << " skipped (" << python << " " << path.string() << " failed; it needs "
              << needs << ")\n";
    return false;
  }
  return true;
}

}  // namespace normlab::cli
