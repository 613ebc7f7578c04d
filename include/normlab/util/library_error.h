// An unexpected error from LibTorch, with what normlab was doing when it came.
//
// LibTorch reports its failures as c10::Error, whose what() carries a C++ backtrace of twenty
// or more frames. normlab catches them where it knows what it is doing (the forward of a
// block, a training step's backward, an evaluation) and turns them into a LibraryError: one
// line for the user, "training step 1, forward of blocks.0: <LibTorch's message>", with the
// backtrace kept apart for the run's log. Outer code adds its own context in front:
//
//   try {
//     s = block->forward(s);
//   } catch (...) {
//     rethrow_with_context("forward of blocks." + std::to_string(l));
//   }
//
// and the branches inside a block add their own names (".attn", ".mlp").
//
// Nothing is added to the path that does not throw.
#pragma once

#include <string>

#include "normlab/util/error.h"

namespace normlab {

class LibraryError : public Error {
 public:
  /// `doing`: what normlab was doing, outermost first; `message`: LibTorch's message without
  /// its backtrace; `backtrace`: LibTorch's full text, backtrace included (for an exception
  /// that is not LibTorch's, its what()). `from_torch`: a c10::Error ("LibTorch" error), else
  /// any other std::exception that reached the same place ("unexpected" error).
  LibraryError(std::string doing, std::string message, std::string backtrace,
               bool from_torch = true);
  const char* kind() const noexcept override { return from_torch_ ? "LibTorch" : "unexpected"; }
  bool from_torch() const noexcept { return from_torch_; }
  const std::string& doing() const noexcept { return doing_; }
  const std::string& message() const noexcept { return message_; }
  const std::string& backtrace() const noexcept { return backtrace_; }

 private:
  std::string doing_, message_, backtrace_;
  bool from_torch_;
};

/// Call inside a catch block: rethrows the exception being handled with `doing` as its context.
/// A c10::Error becomes a LibraryError; so does any other std::exception that is not one of
/// normlab's own Errors (std::bad_alloc, a standard library's out_of_range, ...), its what()
/// folded to one line; a LibraryError gets `doing` in front of its context ("training step 3" +
/// "forward of blocks.0"); normlab's own errors, and anything not a std::exception, are
/// rethrown unchanged. A `doing` that starts with '.' names a sub-module and continues the
/// context around it: ".attn" inside "forward of blocks.0" reads "forward of blocks.0.attn".
[[noreturn]] void rethrow_with_context(const std::string& doing);

/// One line of a message: its lines joined with "; ", blank ones dropped.
std::string one_line(const std::string& text);

}  // namespace normlab
