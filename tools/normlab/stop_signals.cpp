#include "stop_signals.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace normlab::cli {
namespace {

sigset_t stop_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

}  // namespace

const StopSignals& StopSignals::start(const std::string& who) {
  const sigset_t set = stop_set();
  if (const int rc = pthread_sigmask(SIG_BLOCK, &set, nullptr); rc != 0)
    throw std::runtime_error(std::string("blocking SIGINT and SIGTERM: ") + std::strerror(rc));
  auto* s = new StopSignals(who);  // never deleted: the waiter runs until the process ends
  std::thread(&StopSignals::wait_loop, s).detach();
  return *s;
}

StopSignals::StopSignals(const std::string& who) {
  const char* names[2] = {"SIGINT", "SIGTERM"};
  for (int k = 0; k < 2; ++k)
    lines_[k] = "normlab train: " + who + names[k] +
                ": stopping after this step with a checkpoint (a second signal ends the process "
                "at once)\n";
}

// The first signal raises the flag and prints one line; the second one gets its default action
// (the process ends by that signal, as it would without normlab's handling).
void StopSignals::wait_loop() {
  pthread_setname_np(pthread_self(), kWaiterName);
  const sigset_t set = stop_set();
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    if (stop_.exchange(true)) {
      std::signal(sig, SIG_DFL);
      sigset_t one;
      sigemptyset(&one);
      sigaddset(&one, sig);
      pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
      ::raise(sig);
      return;
    }
    const std::string& line = lines_[sig == SIGINT ? 0 : 1];
    [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, line.data(), line.size());
  }
}

void StopSignals::raise_and_wait(int sig) const {
  ::kill(::getpid(), sig);  // to the process, which only the waiter takes
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!stop_.load() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void StopSignals::unblock() const {
  const sigset_t set = stop_set();
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
}

}  // namespace normlab::cli
