// How `normlab train` takes SIGINT and SIGTERM: the first one finishes the current step, saves a
// checkpoint and exits with code 4; a second one ends the process at once.
//
// No signal handler runs on a thread that computes. The two signals are blocked in the thread
// that constructs StopSignals, and so in every thread created after it (LibTorch's and OpenMP's
// workers, Open MPI's progress threads), and one waiter thread takes them with sigwait. A
// handler would run on the stack of whichever thread the kernel picked, and the signal frame it
// pushes there overwrote data that oneDNN's fp32 matmul keeps below the stack pointer: a SIGTERM
// in the middle of a step corrupted the heap (docs/reliability.md, "Signals and oneDNN").
//
// Start it first, before anything starts a thread. A child process inherits the blocked
// signals: call unblock() before starting one.
#pragma once

#include <atomic>
#include <string>

namespace normlab::cli {

/// The waiter thread's name (/proc/PID/task/TID/comm).
inline constexpr const char* kWaiterName = "normlab-signals";

class StopSignals {
 public:
  /// Blocks the signals in the calling thread and starts the waiter. The object lives until the
  /// process ends (the waiter uses it to the last). `who` prefixes the line printed on the first
  /// signal (e.g. "rank 1 of 2: ").
  static const StopSignals& start(const std::string& who);

  /// Raised by the first SIGINT or SIGTERM (TrainOptions::stop).
  const std::atomic<bool>* flag() const { return &stop_; }
  /// Sends `sig` (SIGINT or SIGTERM) to this process as a signal from outside would be, and
  /// returns once the waiter has raised the flag (the fault injection's raise_at_step).
  void raise_and_wait(int sig) const;
  /// Unblocks the signals in the calling thread (before it starts a child process); from then
  /// on a signal delivered to this thread has its default action.
  void unblock() const;

 private:
  explicit StopSignals(const std::string& who);
  void wait_loop();

  std::atomic<bool> stop_{false};
  std::string lines_[2];  // printed on the first SIGINT, SIGTERM
};

}  // namespace normlab::cli
