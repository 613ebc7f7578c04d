// normlab's errors: one hierarchy for everything a user can get wrong or a machine can break.
//
//   Error                  base; what() names the file, key or value and says what is wrong
//   ├─ ConfigError         a config file, key, value or override; a CLI option's value
//   ├─ DataError           input text, a tokenizer, token shards (InputError, TokenizerError,
//   │                      ShardError name the stage)
//   ├─ CheckpointError     checkpoints, exports, safetensors files, run folders to resume
//   │                      (SafetensorsError: the file format itself)
//   ├─ DistributedError    the launcher's environment, a collective that failed or timed out
//   │                      (CommError)
//   └─ FileError           the file system: a path that cannot be created, read or written
//
// The policy (docs/architecture.md, "Errors"): code that checks what a user or the machine
// supplies throws one of these, before anything is written where it can; std::invalid_argument
// is for a library function called with an argument it does not accept (a caller's bug, or a
// value the caller passes on unchecked); TORCH_CHECK states tensor invariants inside the
// library. The CLI prints "normlab <command>: <kind> error: <what>" for an Error (kind() is
// config, data, checkpoint, distributed or file) and "normlab <command>: error: <what>" for
// anything else, and exits with code 1 either way.
#pragma once

#include <stdexcept>

namespace normlab {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
  /// "config", "data", "checkpoint", "distributed" or "file": the CLI's word for it.
  virtual const char* kind() const noexcept = 0;
};

class ConfigError : public Error {
 public:
  using Error::Error;
  const char* kind() const noexcept override { return "config"; }
};

class DataError : public Error {
 public:
  using Error::Error;
  const char* kind() const noexcept override { return "data"; }
};

class CheckpointError : public Error {
 public:
  using Error::Error;
  const char* kind() const noexcept override { return "checkpoint"; }
};

class DistributedError : public Error {
 public:
  using Error::Error;
  const char* kind() const noexcept override { return "distributed"; }
};

class FileError : public Error {
 public:
  using Error::Error;
  const char* kind() const noexcept override { return "file"; }
};

}  // namespace normlab
