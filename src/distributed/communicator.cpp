#include "normlab/distributed/communicator.h"
#include "normlab/util/error.h"

#include <torch/torch.h>

#include <charconv>

#include "distributed/comm/backends.h"
#include "normlab/distributed/slurm_hostlist.h"

namespace normlab {

namespace {

// The value of `key` as an integer in [lo, hi]; `fallback` when absent.
int env_int(const std::map<std::string, std::string>& env, const std::string& key, int fallback,
            int lo, int hi) {
  const auto it = env.find(key);
  if (it == env.end()) return fallback;
  const std::string& s = it->second;
  int v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < lo || v > hi)
    throw DistributedError("environment variable " + key + "=" + s + ": expected an integer in [" +
                           std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v;
}

bool has(const std::map<std::string, std::string>& env, const std::string& key) {
  return env.count(key) > 0;
}

// MASTER_ADDR, else the first node of a multi-node Slurm job, else this machine; empty with
// d.master_addr_problem set when a multi-node job names no first node.
void rendezvous_address(const std::map<std::string, std::string>& env, DistEnv& d) {
  if (has(env, "MASTER_ADDR")) {
    d.master_addr = env.at("MASTER_ADDR");
    return;
  }
  std::string nodes_var;
  for (const char* k : {"SLURM_JOB_NUM_NODES", "SLURM_NNODES"})
    if (has(env, k) && env_int(env, k, 1, 1, 1 << 20) > 1) {
      nodes_var = std::string(k) + "=" + env.at(k);
      break;
    }
  if (nodes_var.empty()) return;  // one node: 127.0.0.1
  const std::string fix =
      ": export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -1) "
      "before srun";
  for (const char* k : {"SLURM_JOB_NODELIST", "SLURM_NODELIST"}) {
    if (!has(env, k)) continue;
    try {
      d.master_addr = slurm_first_host(env.at(k));
    } catch (const DistributedError& e) {
      d.master_addr.clear();
      d.master_addr_problem = "MASTER_ADDR is not set in a Slurm job on several nodes (" +
                              nodes_var + ") and " + k + " does not name its first node (" +
                              e.what() + ")" + fix;
    }
    return;
  }
  d.master_addr.clear();
  d.master_addr_problem = "MASTER_ADDR is not set in a Slurm job on several nodes (" + nodes_var +
                          ") and neither SLURM_JOB_NODELIST nor SLURM_NODELIST names its first "
                          "node" +
                          fix;
}

}  // namespace

DistEnv dist_env_from(const std::map<std::string, std::string>& env) {
  DistEnv d;
  constexpr int kMax = 1 << 20;
  if (has(env, "WORLD_SIZE") && has(env, "RANK")) {
    d.launcher = "torchrun";
    d.world = env_int(env, "WORLD_SIZE", 1, 1, kMax);
    d.rank = env_int(env, "RANK", 0, 0, d.world - 1);
    d.local_rank = env_int(env, "LOCAL_RANK", 0, 0, kMax);
    d.has_local_rank = has(env, "LOCAL_RANK");
    d.agent_store = env.count("TORCHELASTIC_USE_AGENT_STORE") &&
                    env.at("TORCHELASTIC_USE_AGENT_STORE") == "True";
    if (has(env, "TORCHELASTIC_RESTART_COUNT"))
      d.restart_count = env.at("TORCHELASTIC_RESTART_COUNT");
  } else if (has(env, "OMPI_COMM_WORLD_SIZE")) {
    d.launcher = "mpi";
    d.world = env_int(env, "OMPI_COMM_WORLD_SIZE", 1, 1, kMax);
    d.rank = env_int(env, "OMPI_COMM_WORLD_RANK", 0, 0, d.world - 1);
    d.local_rank = env_int(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0, 0, kMax);
    d.has_local_rank = has(env, "OMPI_COMM_WORLD_LOCAL_RANK");
  } else if (has(env, "PMIX_RANK") && has(env, "SLURM_NTASKS")) {  // srun --mpi=pmix
    d.launcher = "mpi";
    d.world = env_int(env, "SLURM_NTASKS", 1, 1, kMax);
    d.rank = env_int(env, "PMIX_RANK", 0, 0, d.world - 1);
    d.local_rank = env_int(env, "SLURM_LOCALID", 0, 0, kMax);
    d.has_local_rank = has(env, "SLURM_LOCALID");
  } else if (has(env, "SLURM_PROCID") && has(env, "SLURM_NTASKS")) {
    d.launcher = "slurm";
    d.world = env_int(env, "SLURM_NTASKS", 1, 1, kMax);
    d.rank = env_int(env, "SLURM_PROCID", 0, 0, d.world - 1);
    d.local_rank = env_int(env, "SLURM_LOCALID", 0, 0, kMax);
    d.has_local_rank = has(env, "SLURM_LOCALID");
  }
  for (const char* k : {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"})
    if (has(env, k)) d.gpu_vars[k] = env.at(k);
  for (const char* k : {"CUDA_VISIBLE_DEVICES", "SLURM_GPUS_PER_TASK", "SLURM_STEP_GPUS"})
    if (has(env, k)) d.gpu_vars[k] = env.at(k);
  rendezvous_address(env, d);
  d.master_port = env_int(env, "MASTER_PORT", d.master_port, 1, 65535);
  return d;
}

GpuPlacement gpu_placement(const DistEnv& env) {
  GpuPlacement p;
  p.local_rank = env.has_local_rank ? env.local_rank : -1;
  p.world = env.world;
  p.vars = env.gpu_vars;
  return p;
}

double Communicator::sum(double v) {
  torch::Tensor t = torch::full({1}, v, torch::kDouble);
  all_reduce(t, ReduceOp::Sum);
  return t.item<double>();
}

double Communicator::max(double v) {
  torch::Tensor t = torch::full({1}, v, torch::kDouble);
  all_reduce(t, ReduceOp::Max);
  return t.item<double>();
}

namespace {
struct Done final : Communicator::Pending {
  void wait() override {}
};
}  // namespace

std::unique_ptr<Communicator::Pending> Communicator::all_gather_async(torch::Tensor& out,
                                                                      const torch::Tensor& in) {
  all_gather(out, in);
  return std::make_unique<Done>();
}

std::unique_ptr<Communicator::Pending> Communicator::reduce_scatter_async(torch::Tensor& out,
                                                                          const torch::Tensor& in) {
  reduce_scatter(out, in);
  return std::make_unique<Done>();
}

void SingleProcess::all_gather(torch::Tensor& out, const torch::Tensor& in) {
  TORCH_CHECK(out.numel() == in.numel(), "all_gather: out has ", out.numel(), " elements, in ",
              in.numel());
  out.view(-1).copy_(in.view(-1));
}

void SingleProcess::reduce_scatter(torch::Tensor& out, const torch::Tensor& in) {
  TORCH_CHECK(out.numel() == in.numel(), "reduce_scatter: out has ", out.numel(), " elements, in ",
              in.numel());
  out.view(-1).copy_(in.view(-1));
}

std::unique_ptr<Communicator> make_communicator(const DistEnv& env, const CommOptions& o,
                                                torch::Device device) {
  if (env.world == 1 && !(o.engine_for_one && device.is_cuda()))
    return std::make_unique<SingleProcess>();
  const CommBackend b = o.backend != CommBackend::Auto ? o.backend
                        : device.is_cuda()             ? CommBackend::Nccl
                                                       : CommBackend::Mpi;
  if (b == CommBackend::Nccl) {
    if (!device.is_cuda())
      throw ConfigError("distributed.backend = nccl needs train.device = cuda (got " +
                        device.str() + ")");
    if (env.master_addr.empty()) throw DistributedError(env.master_addr_problem);
    if (!device.has_index())
      throw ConfigError("distributed.backend = nccl needs a CUDA device with its index (got " +
                        device.str() + ")");
    return comm::make_nccl(env, o, device);
  }
  if (env.launcher != "mpi")
    throw ConfigError(
        "distributed.backend = mpi (CPU training over " + std::to_string(env.world) +
        " processes) needs an MPI launcher: run `mpirun -n N normlab train ...` (or srun "
        "--mpi=pmix under Slurm); this process was started by " +
        env.launcher);
  return comm::make_mpi(env, o);
}

}  // namespace normlab
