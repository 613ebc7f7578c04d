// The local launcher: each run a child process (fork + execve) of the sweep.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <stdexcept>
#include <thread>

#include "normlab/sweep/launcher.h"

namespace normlab {
namespace {

pid_t spawn(const RunStart& l) {
  // The command line and environment, built before fork (nothing allocates after it).
  std::vector<char*> argv, envp;
  for (const auto& a : l.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : l.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("sweep: fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    // Own process group: the terminal's Ctrl-C reaches the sweep only, which then stops each
    // child exactly once. Dies with the sweep (kill -9 of the sweep kills its children; their
    // checkpoints are atomic, so the next sweep resumes them).
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(125);
    const int fd = ::open(l.console.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0) ::_exit(126);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::close(fd);
    ::execvpe(argv[0], argv.data(), envp.data());  // normlab by its path; a launcher may be on PATH
    const char msg[] = "normlab sweep: cannot execute the run's command (see the line above)\n";
    [[maybe_unused]] const ssize_t n = ::write(2, msg, sizeof msg - 1);
    ::_exit(127);
  }
  return pid;
}

class LocalLauncher final : public RunLauncher {
 public:
  std::string start(const RunStart& run) override {
    const pid_t pid = spawn(run);
    children_[pid] = {run.point, run.console};
    return "pid " + std::to_string(pid);
  }

  std::optional<RunEnd> poll() override {
    int wstatus = 0;
    const pid_t pid = ::waitpid(-1, &wstatus, WNOHANG);
    const auto it = pid > 0 ? children_.find(pid) : children_.end();
    if (it == children_.end()) {
      if (pid <= 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      return std::nullopt;
    }
    RunEnd e;
    e.point = it->second.first;
    e.log = it->second.second;
    e.exit_code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1;
    if (WIFSIGNALED(wstatus)) e.signal = WTERMSIG(wstatus);
    children_.erase(it);
    return e;
  }

  void stop(int level) override {
    for (const auto& [pid, child] : children_) ::kill(pid, level >= 2 ? SIGKILL : SIGTERM);
  }

 private:
  std::map<pid_t, std::pair<size_t, std::string>> children_;  // pid -> point, console
};

}  // namespace

std::unique_ptr<RunLauncher> make_local_launcher() { return std::make_unique<LocalLauncher>(); }

}  // namespace normlab
