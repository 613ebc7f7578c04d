// Communicator: the collectives the FSDP layer and the trainer need, over an existing engine.
//   world 1   SingleProcess (no engine; every collective is a copy)
//   CPU       Open MPI (launch with mpirun, or srun under Slurm with PMIx)
//   CUDA      c10d ProcessGroupNCCL with a TCPStore rendezvous compatible with torchrun
// The launcher's variables are read once by the program (DistEnv, from an environment map);
// the library never reads the environment. Every blocking collective gives up after the
// configured timeout with a CommError naming the collective and the rank, so a dead or hung
// peer ends the job with a clear message instead of a hang.
#pragma once

#include <torch/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>

#include "normlab/config/enums.h"
#include "normlab/util/device.h"
#include "normlab/util/error.h"

namespace normlab {

/// Where this process sits in a job, from the launcher's environment variables.
struct DistEnv {
  std::string launcher = "none";  // none, torchrun, slurm, mpi
  int rank = 0;
  int world = 1;
  int local_rank = 0;           // this process's index among the job's processes on its node
  bool has_local_rank = false;  // the launcher gave local_rank (else it is 0 by default)
  std::map<std::string, std::string> gpu_vars;  // what chooses the GPU (GpuPlacement::vars)
  // The TCPStore rendezvous of NCCL: MASTER_ADDR; else, in a Slurm job over several nodes, the
  // job's first node; else this machine. Empty when a multi-node job gives no way to know it:
  // master_addr_problem then says why, and the NCCL engine refuses to start.
  std::string master_addr = "127.0.0.1";
  std::string master_addr_problem;
  int master_port = 29500;
  bool agent_store = false;  // torchrun's agent hosts the TCPStore (TORCHELASTIC_USE_AGENT_STORE)
  std::string restart_count = "0";
};

/// Reads, in order of precedence: torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
/// MASTER_PORT, TORCHELASTIC_*), Open MPI / PMIx (OMPI_COMM_WORLD_*, PMIX_RANK), Slurm
/// (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID). None: a single process. Throws
/// DistributedError naming the variable when a value is malformed or out of range.
/// Without MASTER_ADDR, a Slurm job on more than one node (SLURM_JOB_NUM_NODES or SLURM_NNODES
/// above 1) takes the first host of SLURM_JOB_NODELIST (or SLURM_NODELIST); a single node keeps
/// 127.0.0.1.
DistEnv dist_env_from(const std::map<std::string, std::string>& env);

/// This rank's placement for choosing its GPU (choose_cuda_index, util/device.h).
GpuPlacement gpu_placement(const DistEnv& env);

/// A collective did not complete (timeout, a dead peer, an engine error).
class CommError : public DistributedError {
 public:
  using DistributedError::DistributedError;
};

enum class ReduceOp { Sum, Max };

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  virtual std::string backend() const = 0;
  /// The engine library's version where it matters for agreement between ranks (NCCL's,
  /// "2.27.5"); empty otherwise.
  virtual std::string engine_version() const { return ""; }

  /// out (world * n elements) <- every rank's `in` (n elements), in rank order. Contiguous,
  /// same dtype and device.
  virtual void all_gather(torch::Tensor& out, const torch::Tensor& in) = 0;
  /// A collective in flight: wait() completes it (NCCL: makes the current stream wait for it).
  class Pending {
   public:
    virtual ~Pending() = default;
    virtual void wait() = 0;
  };
  /// all_gather started now, completed by wait(); `out` and `in` must stay alive and `in`
  /// unchanged until then. Every rank must start collectives in the same order. The default
  /// runs it at once (engines without overlap).
  virtual std::unique_ptr<Pending> all_gather_async(torch::Tensor& out, const torch::Tensor& in);
  /// out (n) <- the sum over ranks of in[rank * n, (rank + 1) * n). Float types.
  virtual void reduce_scatter(torch::Tensor& out, const torch::Tensor& in) = 0;
  /// reduce_scatter started now, completed by wait(); the same rules as all_gather_async
  /// (`out` and `in` alive, `in` unchanged, the same order on every rank). The default runs it
  /// at once.
  virtual std::unique_ptr<Pending> reduce_scatter_async(torch::Tensor& out,
                                                        const torch::Tensor& in);
  /// t <- the sum (or max) over ranks of t, in place.
  virtual void all_reduce(torch::Tensor& t, ReduceOp op) = 0;
  virtual void broadcast(torch::Tensor& t, int root) = 0;
  virtual void barrier() = 0;
  /// A communicator of the ranks that pass the same `color`, ranked by `key` (ties: by rank),
  /// as MPI_Comm_split: every rank calls it, in the same order relative to its other
  /// collectives. It must be destroyed before this one. Hybrid sharding (fsdp.h) splits the
  /// world into shard groups and replica groups.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  /// Helpers over all_reduce for host scalars.
  double sum(double v);
  double max(double v);
};

struct CommOptions {
  CommBackend backend = CommBackend::Auto;  // auto: nccl for CUDA devices, mpi for CPU
  std::chrono::seconds timeout{600};
  bool engine_for_one = false;  // world 1 on CUDA still through NCCL (measuring FSDP)
};

/// The communicator for `env` on `device` (NCCL runs on that CUDA device: resolve it with
/// resolve_device(name, gpu_placement(env))): SingleProcess when env.world == 1 (unless
/// engine_for_one on a CUDA device); throws
/// ConfigError when the backend does not fit the device or the launcher (MPI needs mpirun or
/// srun; NCCL needs a CUDA build and device), and DistributedError without a rendezvous
/// address (DistEnv::master_addr_problem says why), naming what to change.
std::unique_ptr<Communicator> make_communicator(const DistEnv& env, const CommOptions& options,
                                                torch::Device device);

/// world 1, no engine.
class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world() const override { return 1; }
  std::string backend() const override { return "single"; }
  void all_gather(torch::Tensor& out, const torch::Tensor& in) override;
  void reduce_scatter(torch::Tensor& out, const torch::Tensor& in) override;
  void all_reduce(torch::Tensor&, ReduceOp) override {}
  void broadcast(torch::Tensor&, int) override {}
  void barrier() override {}
  std::unique_ptr<Communicator> split(int, int) override {
    return std::make_unique<SingleProcess>();
  }
};

}  // namespace normlab
