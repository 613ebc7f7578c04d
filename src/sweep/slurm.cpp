// The Slurm launcher (slurm.h): job scripts, sbatch, squeue, scontrol and scancel.
#include "normlab/sweep/slurm.h"

#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "normlab/util/file_io.h"

namespace normlab {
namespace fs = std::filesystem;
namespace {

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (const char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

struct CommandOutput {
  int code = -1;     // exit status; 127: could not be executed
  std::string text;  // stdout and stderr
};

// Runs argv (found on PATH) with environment `env`, capturing its output.
CommandOutput run_command(const std::vector<std::string>& args,
                          const std::vector<std::string>& env) {
  std::vector<char*> argv, envp;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    ::close(fds[1]);
    ::execvpe(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  CommandOutput out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    out.text.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int wstatus = 0;
  while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  out.code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1;
  return out;
}

// The sweep's environment for sbatch (which passes it on to the job): without the SLURM_
// variables of an allocation the sweep itself may run in, which would confuse the new job.
std::vector<std::string> submit_environment(const std::vector<std::string>& env) {
  std::vector<std::string> out;
  for (const auto& kv : env)
    if (kv.rfind("SLURM_", 0) != 0 || kv.rfind("SLURM_CONF=", 0) == 0) out.push_back(kv);
  return out;
}

// States of a job that has not ended (it may still run, or run again after a requeue).
bool slurm_live(const std::string& state) {
  static const std::set<std::string> states = {
      "PENDING",   "RUNNING",      "CONFIGURING",  "COMPLETING",    "SUSPENDED",
      "REQUEUED",  "REQUEUE_HOLD", "REQUEUE_FED",  "RESIZING",      "SIGNALING",
      "STAGE_OUT", "STOPPED",      "SPECIAL_EXIT", "RESV_DEL_HOLD", "POWER_UP_NODE"};
  return states.count(state) > 0;
}

// "KEY=value" of `scontrol show job -o` output; "" when absent.
std::string scontrol_field(const std::string& line, const std::string& key) {
  std::istringstream in(line);
  for (std::string w; in >> w;)
    if (w.rfind(key + "=", 0) == 0) return w.substr(key.size() + 1);
  return "";
}

struct SlurmJob {
  std::string id;
  size_t point = 0;
  int64_t target = 0;
  std::string log;
  std::string state;  // as squeue last said
};

class SlurmLauncher final : public RunLauncher {
 public:
  SlurmLauncher(const SlurmOptions& o, const std::string& sweep_dir, std::vector<std::string> names,
                const std::vector<std::string>& env)
      : o_(o),
        state_file_((fs::path(sweep_dir) / "slurm_jobs.json").string()),
        names_(std::move(names)),
        env_(submit_environment(env)) {
    load();
  }

  std::string start(const RunStart& run) override {
    const std::string script = (fs::path(run.dir) / "job.sh").string();
    const std::string text = slurm_job_script(run, o_);
    write_file_atomic(script, [&](FileWriter& w) { w.write(text); });
    const CommandOutput r =
        run_command({"sbatch", "--parsable", script}, submit_environment(run.env));
    if (r.code == 127)
      throw std::runtime_error(run.name + ": cannot run sbatch (is Slurm installed and on PATH?)");
    std::string id = r.text;
    while (!id.empty() && std::isspace(static_cast<unsigned char>(id.back()))) id.pop_back();
    if (const auto nl = id.rfind('\n'); nl != std::string::npos) id = id.substr(nl + 1);
    id = id.substr(0, id.find(';'));  // "ID;CLUSTER"
    if (r.code != 0 || id.empty() || id.find_first_not_of("0123456789_") != std::string::npos)
      throw std::runtime_error(run.name + ": sbatch rejected the job (" + script + "): " + r.text);
    SlurmJob j{id, run.point, run.target, (fs::path(run.dir) / ("slurm-" + id + ".out")).string(),
               "PENDING"};
    jobs_[id] = j;
    save();
    return "Slurm job " + id + ", log: " + j.log;
  }

  std::optional<RunEnd> poll() override {
    if (ended_.empty()) {
      const auto now = std::chrono::steady_clock::now();
      if (now - last_query_ < std::chrono::duration<double>(o_.poll_seconds)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        return std::nullopt;
      }
      last_query_ = now;
      query();
    }
    if (ended_.empty()) return std::nullopt;
    RunEnd e = ended_.front();
    ended_.pop_front();
    return e;
  }

  void stop(int level) override {
    for (const auto& [id, j] : jobs_) {
      // Level 1: a pending job is cancelled (it resumes when the sweep runs again); a running
      // one's batch shell gets SIGTERM and passes it on to the steps once (job.sh).
      if (level >= 2 || j.state == "PENDING")
        run_command({"scancel", id}, env_);
      else
        run_command({"scancel", "--batch", "--signal=TERM", id}, env_);
    }
  }

  std::vector<std::pair<size_t, int64_t>> attach() override {
    if (jobs_.empty()) return {};
    const auto states = squeue();
    if (!states)
      throw std::runtime_error("sweep: squeue failed; cannot find the sweep's jobs again");
    std::vector<std::pair<size_t, int64_t>> out;
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      const auto s = states->find(it->first);
      if (s != states->end() && slurm_live(s->second)) {
        it->second.state = s->second;
        out.emplace_back(it->second.point, it->second.target);
        ++it;
      } else {
        it = jobs_.erase(it);  // ended while no sweep watched: its run folder tells how
      }
    }
    save();
    return out;
  }

  std::string where() const override {
    return "as Slurm jobs of " + std::to_string(o_.nodes) + " node(s) x " +
           (o_.gpus_per_node > 0 ? std::to_string(o_.gpus_per_node) + " GPU(s)" : "1 task");
  }

 private:
  // SlurmJob id -> state, of every job squeue knows; none when squeue fails.
  std::optional<std::map<std::string, std::string>> squeue() const {
    const CommandOutput r = run_command({"squeue", "-h", "-t", "all", "-o", "%i %T"}, env_);
    if (r.code != 0) return std::nullopt;
    std::map<std::string, std::string> m;
    std::istringstream in(r.text);
    for (std::string id, st; in >> id >> st;) m[id] = st;
    return m;
  }

  // Moves the jobs that ended to ended_.
  void query() {
    const auto states = squeue();
    if (!states) return;  // the controller may be restarting: ask again later
    bool changed = false;
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      SlurmJob& j = it->second;
      const auto s = states->find(j.id);
      if (s != states->end() && slurm_live(s->second)) {
        j.state = s->second;
        ++it;
        continue;
      }
      ended_.push_back(ended(j, s == states->end() ? "" : s->second));
      it = jobs_.erase(it);
      changed = true;
    }
    if (changed) save();
  }

  // How job j ended: `scontrol show job` (kept for MinJobAge), else squeue's last word.
  RunEnd ended(const SlurmJob& j, const std::string& squeue_state) const {
    RunEnd e;
    e.point = j.point;
    e.log = j.log;
    const CommandOutput r = run_command({"scontrol", "show", "job", "-o", j.id}, env_);
    e.state = r.code == 0 ? scontrol_field(r.text, "JobState") : "";
    if (e.state.empty()) e.state = squeue_state.empty() ? "UNKNOWN" : squeue_state;
    const std::string code =
        r.code == 0 ? scontrol_field(r.text, "ExitCode") : "";  // "EXIT:SIGNAL"
    if (const auto colon = code.find(':'); colon != std::string::npos) {
      const int status = std::atoi(code.substr(0, colon).c_str());
      e.signal = std::atoi(code.substr(colon + 1).c_str());
      if (e.signal == 0 && (e.state == "COMPLETED" || e.state == "FAILED")) e.exit_code = status;
    }
    return e;
  }

  void load() {
    std::error_code ec;
    if (!fs::exists(state_file_, ec)) return;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_file(state_file_));
    } catch (const nlohmann::json::exception& e) {
      throw FileError(state_file_ + ": unreadable (" + e.what() + ")");
    }
    const nlohmann::json jobs = j.value("jobs", nlohmann::json::object());
    for (const auto& [name, v] : jobs.items()) {
      for (size_t i = 0; i < names_.size(); ++i)
        if (names_[i] == name)
          jobs_[v.at("job").get<std::string>()] = {v.at("job").get<std::string>(), i,
                                                   v.at("target").get<int64_t>(),
                                                   v.value("log", std::string()), ""};
    }
  }

  void save() const {
    nlohmann::json j = {{"format", "normlab-slurm-jobs"}, {"version", 1}};
    j["jobs"] = nlohmann::json::object();
    for (const auto& [id, job] : jobs_)
      j["jobs"][names_[job.point]] = {{"job", id}, {"target", job.target}, {"log", job.log}};
    const std::string text = j.dump(2) + "\n";
    write_file_atomic(state_file_, [&](FileWriter& w) { w.write(text); });
  }

  SlurmOptions o_;
  std::string state_file_;
  std::vector<std::string> names_;
  std::vector<std::string> env_;          // for squeue, scontrol and scancel
  std::map<std::string, SlurmJob> jobs_;  // by job id: the jobs that have not ended
  std::deque<RunEnd> ended_;
  std::chrono::steady_clock::time_point last_query_{};
};

}  // namespace

std::vector<std::string> split_sbatch_args(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string w; in >> w;) {
    if (w[0] != '-' && !out.empty())
      out.back() += " " + w;
    else
      out.push_back(w);
  }
  return out;
}

std::string slurm_job_script(const RunStart& run, const SlurmOptions& o) {
  const int tasks = o.gpus_per_node > 0 ? o.gpus_per_node : 1;
  std::ostringstream s;
  s << "#!/bin/bash\n"
    << "#SBATCH --job-name=" << shell_quote("normlab-" + run.name) << "\n"
    << "#SBATCH --output=" << shell_quote((fs::path(run.dir) / "slurm-%j.out").string()) << "\n"
    << "#SBATCH --open-mode=append\n"
    << "#SBATCH --nodes=" << o.nodes << "\n"
    << "#SBATCH --ntasks-per-node=" << tasks << "\n";
  if (o.gpus_per_node > 0) s << "#SBATCH --gpus-per-node=" << o.gpus_per_node << "\n";
  s << "#SBATCH --signal=B:TERM@120\n"
    << "#SBATCH --requeue\n";
  for (const auto& a : o.sbatch_args) s << "#SBATCH " << a << "\n";
  s << "# normlab sweep: point " << run.name << ", to step " << run.target
    << "; a requeued job resumes from the run's newest checkpoint (--resume).\n"
    << "cd " << shell_quote(run.dir) << " || exit 1\n"
    << "echo \"==== $(date '+%Y-%m-%d %H:%M:%S') Slurm job $SLURM_JOB_ID (restart "
       "${SLURM_RESTART_COUNT:-0}) on $SLURM_JOB_NODELIST\"\n"
    << "export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n"
    << "export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))\n"
    << "# SIGTERM of the batch shell (the time limit's warning, or the sweep stopping): one\n"
    << "# SIGTERM to the steps, so that the trainer checkpoints and exits 4 (srun itself would\n"
    << "# end the step at once).\n"
    << "stopping=\n"
    << "trap 'stopping=1; scancel --signal=TERM \"$SLURM_JOB_ID\"' TERM\n"
    << "[ -z \"$stopping\" ] || exit 4\n"
    << "srun";
  for (const auto& a : run.argv) s << " " << shell_quote(a);
  s << " &\n"
    << "pid=$!\n"
    << "while kill -0 \"$pid\" 2>/dev/null; do wait \"$pid\"; done\n"
    << "wait \"$pid\"\n";
  return s.str();
}

std::unique_ptr<RunLauncher> make_slurm_launcher(const SlurmOptions& o,
                                                 const std::string& sweep_dir,
                                                 std::vector<std::string> points,
                                                 const std::vector<std::string>& environment) {
  return std::make_unique<SlurmLauncher>(o, sweep_dir, std::move(points), environment);
}

}  // namespace normlab
