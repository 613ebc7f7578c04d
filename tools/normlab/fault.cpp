#include "fault.h"

#ifndef NORMLAB_FAULT_INJECTION  // set by tools/CMakeLists.txt
#define NORMLAB_FAULT_INJECTION 0
#endif

#include <signal.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "normlab/nn/model.h"
#include "normlab/util/error.h"

namespace normlab::cli {
namespace {

constexpr const char* kForms =
    "abort_after_bytes:checkpoint:N, abort_after_bytes:export:N, raise_at_step:SIGNAL:N or "
    "raise_in_parent_at_step:SIGNAL:N, with SIGNAL one of SIGINT, SIGTERM, SIGKILL, SIGSEGV, "
    "SIGABRT, torch_error:blocks:L or std_error:blocks:L";

[[noreturn]] void bad(const std::string& value, const std::string& why) {
  throw ConfigError("NORMLAB_FAULT='" + value + "': " + why + " (test-only fault injection; " +
                    "expected " + kForms + ")");
}

// A decimal integer of at least `min`, all of `text`.
uint64_t number(const std::string& value, const std::string& text, uint64_t min) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || text.size() > 18)
    bad(value, "'" + text + "' is not a count");
  const uint64_t v = std::stoull(text);
  if (v < min) bad(value, "'" + text + "' must be at least " + std::to_string(min));
  return v;
}

}  // namespace

Fault parse_fault(const std::string& value) {
  Fault f;
  if (value.empty()) return f;
  std::vector<std::string> parts;
  std::stringstream ss(value);
  for (std::string p; std::getline(ss, p, ':');) parts.push_back(p);
  if (parts.size() != 3 || value.back() == ':') bad(value, "not three fields separated by ':'");
  if (parts[0] == "abort_after_bytes") {
    if (parts[1] != "checkpoint" && parts[1] != "export")
      bad(value, "unknown writer '" + parts[1] + "' (checkpoint or export)");
    f.kind = Fault::Kind::AbortAfterBytes;
    f.writer = parts[1];
    f.bytes = number(value, parts[2], 0);
    return f;
  }
  if (parts[0] == "raise_at_step" || parts[0] == "raise_in_parent_at_step") {
    // SIGSEGV and SIGABRT stand for a crash (a bad memory access, a failed assertion): raised,
    // they reach the same handlers and end the process the same way.
    const std::pair<const char*, int> signals[] = {{"SIGINT", SIGINT},
                                                   {"SIGTERM", SIGTERM},
                                                   {"SIGKILL", SIGKILL},
                                                   {"SIGSEGV", SIGSEGV},
                                                   {"SIGABRT", SIGABRT}};
    for (const auto& [name, sig] : signals)
      if (parts[1] == name) f.signal = sig;
    if (f.signal == 0)
      bad(value, "unknown signal '" + parts[1] + "' (SIGINT, SIGTERM, SIGKILL, SIGSEGV, SIGABRT)");
    f.kind = Fault::Kind::RaiseAtStep;
    f.parent = parts[0] == "raise_in_parent_at_step";
    f.step = static_cast<int64_t>(number(value, parts[2], 1));
    return f;
  }
  if (parts[0] == "torch_error" || parts[0] == "std_error") {
    if (parts[1] != "blocks") bad(value, "unknown place '" + parts[1] + "' (blocks)");
    f.kind = parts[0] == "torch_error" ? Fault::Kind::TorchError : Fault::Kind::StdError;
    f.block = static_cast<int64_t>(number(value, parts[2], 0));
    return f;
  }
  bad(value, "unknown fault '" + parts[0] + "'");
}

bool fault_injection_built() { return NORMLAB_FAULT_INJECTION != 0; }

const Fault& environment_fault() {
  static const Fault fault = [] {
    const char* v = std::getenv("NORMLAB_FAULT");
    const std::string value = v ? v : "";
    if (!fault_injection_built()) {
      if (!value.empty())
        std::cerr << "normlab: warning: NORMLAB_FAULT is set but ignored: this build has no "
                     "fault injection (a test-only hook; configure with "
                     "-DNORMLAB_FAULT_INJECTION=ON)\n";
      return Fault{};
    }
    Fault f = parse_fault(value);
    f.value = value;
    return f;
  }();
  return fault;
}

std::string fault_notice(const Fault& fault) {
  if (fault.kind == Fault::Kind::None) return "";
  return "fault injection active: NORMLAB_FAULT=" + fault.value + " (a test-only hook)";
}

namespace {

// The executable of process `pid` (/proc/PID/exe), or "" where it cannot be read.
std::filesystem::path executable_of(const std::string& pid) {
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::read_symlink("/proc/" + pid + "/exe", ec);
  return ec ? std::filesystem::path() : p;
}

// Whether the parent process runs the same executable as this one (a normlab sweep).
bool parent_is_normlab() {
  const std::filesystem::path self = executable_of("self");
  const std::filesystem::path parent = executable_of(std::to_string(::getppid()));
  std::error_code ec;
  return !self.empty() && !parent.empty() && std::filesystem::equivalent(self, parent, ec) && !ec;
}

}  // namespace

void check_fault_target(const Fault& fault, int64_t n_layers) {
  if ((fault.kind == Fault::Kind::TorchError || fault.kind == Fault::Kind::StdError) &&
      fault.block >= n_layers)
    throw ConfigError("NORMLAB_FAULT='" + fault.value + "': the model has " +
                      std::to_string(n_layers) + " blocks (0 to " + std::to_string(n_layers - 1) +
                      "), no block " + std::to_string(fault.block));
  if (fault.kind == Fault::Kind::RaiseAtStep && fault.parent && !parent_is_normlab()) {
    const std::filesystem::path parent = executable_of(std::to_string(::getppid()));
    throw ConfigError("NORMLAB_FAULT='" + fault.value + "': the parent process (pid " +
                      std::to_string(::getppid()) + ", " +
                      (parent.empty() ? std::string("unknown") : parent.string()) +
                      ") is not normlab; raise_in_parent_at_step signals only a normlab parent "
                      "(a sweep)");
  }
}

std::unique_ptr<WriteFault> write_fault(const Fault& fault, const std::string& writer) {
  if (fault.kind != Fault::Kind::AbortAfterBytes || fault.writer != writer) return nullptr;
  return std::make_unique<WriteFault>(fault.bytes);
}

std::function<void(int64_t)> step_fault(const Fault& fault, std::function<void(int)> raise_stop) {
  if (fault.kind != Fault::Kind::RaiseAtStep) return {};
  return [fault, raise_stop](int64_t step) {
    if (step != fault.step) return;
    if (fault.parent) {
      if (parent_is_normlab()) ::kill(::getppid(), fault.signal);  // never another program
    } else if (fault.signal == SIGINT || fault.signal == SIGTERM) {
      raise_stop(fault.signal);  // returns once the stop flag is up
    } else {
      ::raise(fault.signal);  // delivered to this thread before raise returns
    }
  };
}

namespace {

class ErrorInBlock : public ForwardHooks {
 public:
  ErrorInBlock(int64_t block, bool torch) : block_(block), torch_(torch) {}
  Streams run_block(size_t layer, SchemeBlockImpl& block, const Streams& in) override {
    if (static_cast<int64_t>(layer) == block_) {
      TORCH_CHECK(!torch_, "a LibTorch error forced by NORMLAB_FAULT=torch_error:blocks:", block_);
      throw std::runtime_error("a std::runtime_error forced by NORMLAB_FAULT=std_error:blocks:" +
                               std::to_string(block_) + "\n  its second line");  // two lines
    }
    return block.forward(in);
  }

 private:
  int64_t block_;
  bool torch_;
};

}  // namespace

std::unique_ptr<ForwardHooks> forward_fault(const Fault& fault) {
  if (fault.kind != Fault::Kind::TorchError && fault.kind != Fault::Kind::StdError) return nullptr;
  return std::make_unique<ErrorInBlock>(fault.block, fault.kind == Fault::Kind::TorchError);
}

}  // namespace normlab::cli
