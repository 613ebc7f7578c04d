// NORMLAB_FAULT: the test-only fault injection point (docs/reliability.md, "Fault injection").
// Only the CLI reads the variable, once per process; the library gets what it describes as
// explicit options (a WriteFault for the checkpoint or export writer, TrainOptions::after_step),
// so tests can crash a process at an exact byte or step instead of racing a `kill -9`:
//
//   abort_after_bytes:checkpoint:N      SIGKILL itself once N bytes of checkpoint files have
//                                       been written (counted over every checkpoint this
//                                       process writes: normlab train, checkpoint consolidate)
//   abort_after_bytes:export:N          the same for the files of `normlab export`
//   raise_at_step:SIGNAL:N              normlab train raises SIGNAL (SIGINT, SIGTERM, SIGKILL,
//                                       SIGSEGV, SIGABRT) in itself after step N's metrics line
//   raise_in_parent_at_step:SIGNAL:N    ... in its parent process instead (the sweep that
//                                       launched it: Ctrl-C or kill -9 of the sweep at step N)
//   torch_error:blocks:L                a LibTorch error (c10::Error, with its C++ backtrace)
//                                       thrown in the forward of blocks.L (normlab train and
//                                       eval), as an unexpected one from LibTorch would be
//   std_error:blocks:L                  the same with a std::runtime_error of two lines (an
//                                       exception that is not LibTorch's)
//
// Unset or empty: no fault. Anything else stops every command with a ConfigError naming the
// variable and the value.
//
// A test-only hook, not a feature: it is honoured only in a build configured with
// -DNORMLAB_FAULT_INJECTION=ON (tools/test.sh); any other build ignores the variable with a
// one-line warning. Where it is active, every command says so on the first line of its stderr,
// and `normlab train` on the first line of train.log. raise_in_parent_at_step signals only a
// parent that is normlab itself (a sweep): with any other parent, train refuses to start. A
// block past the model's last one is refused before any work (check_fault_target).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "normlab/util/file_io.h"

namespace normlab {
class ForwardHooks;  // nn/model.h
}  // namespace normlab

namespace normlab::cli {

struct Fault {
  enum class Kind { None, AbortAfterBytes, RaiseAtStep, TorchError, StdError };
  Kind kind = Kind::None;
  std::string value;    // the variable's value, for the messages that say the fault is active
  std::string writer;   // AbortAfterBytes: "checkpoint" or "export"
  uint64_t bytes = 0;   // AbortAfterBytes
  int signal = 0;       // RaiseAtStep
  bool parent = false;  // RaiseAtStep: in the parent process
  int64_t step = 0;     // RaiseAtStep
  int64_t block = 0;    // TorchError, StdError
};

/// Parses a value of NORMLAB_FAULT; throws ConfigError naming the variable and the value.
Fault parse_fault(const std::string& value);

/// NORMLAB_FAULT of this process, parsed on the first call (main calls it before any command):
/// no fault in a build without fault injection (one warning on stderr when the variable is set).
const Fault& environment_fault();

/// Whether this build honours NORMLAB_FAULT (configured with NORMLAB_FAULT_INJECTION=ON).
bool fault_injection_built();

/// "fault injection active: NORMLAB_FAULT=<value> (a test-only hook)" where a fault is set, else
/// "": the first line of a command's stderr and of train.log.
std::string fault_notice(const Fault& fault);

/// Throws ConfigError when the fault names a block the model does not have (blocks 0 to
/// n_layers - 1), or signals a parent process that is not normlab (raise_in_parent_at_step from
/// a shell would kill the shell).
void check_fault_target(const Fault& fault, int64_t n_layers);

/// A WriteFault for `writer` ("checkpoint" or "export") when the fault targets it, else null.
std::unique_ptr<WriteFault> write_fault(const Fault& fault, const std::string& writer);

/// TrainOptions::after_step for a RaiseAtStep fault; empty otherwise. SIGINT and SIGTERM go
/// through `raise_stop` (normlab train takes them on a waiter thread, which a signal raised in
/// the calling thread would never reach); the others are raised in the calling thread.
std::function<void(int64_t)> step_fault(const Fault& fault, std::function<void(int)> raise_stop);

/// ForwardHooks that throw in the forward of the fault's block (TrainOptions::forward_hooks,
/// DecoderLM::hooks): a c10::Error for a TorchError fault, a std::runtime_error for a StdError
/// one; null otherwise.
std::unique_ptr<ForwardHooks> forward_fault(const Fault& fault);

}  // namespace normlab::cli
