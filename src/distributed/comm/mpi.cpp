// The CPU engine: Open MPI over MPI_COMM_WORLD (or a part of it, split). Collectives are issued
// non-blocking and polled, so that a peer that died or hangs ends in a CommError after the timeout
// (mpirun itself also ends the job when a rank exits abnormally). Polling sleeps between tests:
// with more ranks than cores (tests, laptops) a spinning wait would starve the ranks it waits for.
// A collective that failed or timed out is still active inside MPI, which may write into its
// buffers whenever MPI is entered again: its tensors are kept alive for the rest of the process
// (abandon), so that the memory can never be handed to another tensor.
#include <torch/torch.h>
#include "normlab/util/error.h"

#include <chrono>
#include <thread>
#include <vector>

#include "build_config.h"
#include "distributed/comm/backends.h"

#if NORMLAB_WITH_MPI
#define OMPI_SKIP_MPICXX 1  // the C API only
#include <mpi.h>
#endif

namespace normlab::comm {

#if NORMLAB_WITH_MPI
namespace {

MPI_Datatype mpi_type(const torch::Tensor& t, bool reducing) {
  switch (t.scalar_type()) {
    case torch::kFloat: return MPI_FLOAT;
    case torch::kDouble: return MPI_DOUBLE;
    case torch::kLong: return MPI_INT64_T;
    case torch::kInt: return MPI_INT32_T;
    case torch::kBFloat16: return MPI_UINT16_T;  // summed by bf16_sum (MPI has no bfloat16)
    default: break;
  }
  TORCH_CHECK(!reducing, "MPI communicator: cannot reduce ", t.scalar_type(),
              " tensors (float, double, bfloat16 sums, int32, int64)");
  return MPI_BYTE;
}

// MPI_Op for bfloat16 sums: each pair added in float and rounded back to nearest even, as
// NCCL's bfloat16 reductions do.
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const c10::BFloat16*>(in);
  auto* b = static_cast<c10::BFloat16*>(inout);
  for (int i = 0; i < *len; ++i)
    b[i] = c10::BFloat16(static_cast<float>(a[i]) + static_cast<float>(b[i]));
}

int count_of(const torch::Tensor& t, MPI_Datatype type) {
  const int64_t n =
      type == MPI_BYTE ? t.numel() * static_cast<int64_t>(t.element_size()) : t.numel();
  TORCH_CHECK(n <= INT32_MAX, "MPI communicator: ", n, " elements exceed MPI's int count");
  return static_cast<int>(n);
}

void check_cpu(const torch::Tensor& t, const char* what) {
  TORCH_CHECK(t.device().is_cpu() && t.is_contiguous(), "MPI communicator: ", what,
              " needs a contiguous CPU tensor, got ", t.device(),
              t.is_contiguous() ? "" : " (not contiguous)");
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(const DistEnv& env, const CommOptions& o) : timeout_(o.timeout) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
      // Every call comes from the thread that runs the step (the autograd engine runs CPU
      // backward passes on the calling thread), so SERIALIZED is more than needed; FUNNELED
      // would do, SINGLE would not (MPI's own progress threads exist besides).
      if (provided < MPI_THREAD_FUNNELED)
        throw DistributedError("MPI provides thread level " + std::to_string(provided) +
                               ", normlab needs at least MPI_THREAD_FUNNELED");
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &world_);
    MPI_Op_create(&bf16_sum, /*commute=*/1, &bf16_sum_);
    if (rank_ != env.rank || world_ != env.world)
      throw DistributedError("MPI reports rank " + std::to_string(rank_) + " of " +
                             std::to_string(world_) + " but the launcher's variables say rank " +
                             std::to_string(env.rank) + " of " + std::to_string(env.world));
  }
  // A sub-communicator of `root` (split): shares its bf16 operator, its failure state and its
  // abandoned buffers; frees only its own MPI communicator.
  MpiCommunicator(MpiCommunicator* root, MPI_Comm comm)
      : comm_(comm),
        bf16_sum_(root->bf16_sum_),
        timeout_(root->timeout_),
        root_(root),
        abandoned_(nullptr) {
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &world_);
  }
  ~MpiCommunicator() override {
    // After a failed collective, peers may be gone: finalizing could block. Exiting without it
    // makes mpirun end the job, which is what a failed rank should do. The abandoned buffers
    // are then never freed: MPI may still write into them until the process ends.
    if (root_ != this) {
      if (!root_->failed_) MPI_Comm_free(&comm_);
      return;
    }
    if (!failed_) {
      MPI_Op_free(&bf16_sum_);
      MPI_Finalize();
      delete abandoned_;
    }
  }

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  std::string backend() const override { return "mpi"; }

  void all_gather(torch::Tensor& out, const torch::Tensor& in) override {
    check_cpu(out, "all_gather");
    check_cpu(in, "all_gather");
    TORCH_CHECK(out.numel() == in.numel() * world_ && out.scalar_type() == in.scalar_type(),
                "all_gather: out must hold world x in elements of the same dtype");
    const MPI_Datatype type = mpi_type(in, false);
    MPI_Request req;
    check(MPI_Iallgather(in.data_ptr(), count_of(in, type), type, out.data_ptr(),
                         count_of(in, type), type, comm_, &req),
          "all_gather");
    wait(req, "all_gather", in.numel(), {out, in});
  }

  std::unique_ptr<Pending> all_gather_async(torch::Tensor& out, const torch::Tensor& in) override {
    check_cpu(out, "all_gather");
    check_cpu(in, "all_gather");
    TORCH_CHECK(out.numel() == in.numel() * world_ && out.scalar_type() == in.scalar_type(),
                "all_gather: out must hold world x in elements of the same dtype");
    const MPI_Datatype type = mpi_type(in, false);
    auto p = std::make_unique<InFlight>(this, "all_gather", in.numel(), out, in);
    check(MPI_Iallgather(in.data_ptr(), count_of(in, type), type, out.data_ptr(),
                         count_of(in, type), type, comm_, &p->req),
          "all_gather");
    return p;
  }

  void reduce_scatter(torch::Tensor& out, const torch::Tensor& in) override {
    check_cpu(out, "reduce_scatter");
    check_cpu(in, "reduce_scatter");
    TORCH_CHECK(in.numel() == out.numel() * world_ && out.scalar_type() == in.scalar_type(),
                "reduce_scatter: in must hold world x out elements of the same dtype");
    const MPI_Datatype type = mpi_type(in, true);
    MPI_Request req;
    check(MPI_Ireduce_scatter_block(in.data_ptr(), out.data_ptr(), count_of(out, type), type,
                                    sum_op(in), comm_, &req),
          "reduce_scatter");
    wait(req, "reduce_scatter", in.numel(), {out, in});
  }

  std::unique_ptr<Pending> reduce_scatter_async(torch::Tensor& out,
                                                const torch::Tensor& in) override {
    check_cpu(out, "reduce_scatter");
    check_cpu(in, "reduce_scatter");
    TORCH_CHECK(in.numel() == out.numel() * world_ && out.scalar_type() == in.scalar_type(),
                "reduce_scatter: in must hold world x out elements of the same dtype");
    const MPI_Datatype type = mpi_type(in, true);
    auto p = std::make_unique<InFlight>(this, "reduce_scatter", in.numel(), out, in);
    check(MPI_Ireduce_scatter_block(in.data_ptr(), out.data_ptr(), count_of(out, type), type,
                                    sum_op(in), comm_, &p->req),
          "reduce_scatter");
    return p;
  }

  void all_reduce(torch::Tensor& t, ReduceOp op) override {
    check_cpu(t, "all_reduce");
    const MPI_Datatype type = mpi_type(t, true);
    MPI_Request req;
    TORCH_CHECK(op == ReduceOp::Sum || t.scalar_type() != torch::kBFloat16,
                "MPI communicator: no bfloat16 max");
    check(MPI_Iallreduce(MPI_IN_PLACE, t.data_ptr(), count_of(t, type), type,
                         op == ReduceOp::Sum ? sum_op(t) : MPI_MAX, comm_, &req),
          "all_reduce");
    wait(req, "all_reduce", t.numel(), {t});
  }

  void broadcast(torch::Tensor& t, int root) override {
    check_cpu(t, "broadcast");
    const MPI_Datatype type = mpi_type(t, false);
    MPI_Request req;
    check(MPI_Ibcast(t.data_ptr(), count_of(t, type), type, root, comm_, &req), "broadcast");
    wait(req, "broadcast", t.numel(), {t});
  }

  void barrier() override {
    MPI_Request req;
    check(MPI_Ibarrier(comm_, &req), "barrier");
    wait(req, "barrier", 0, {});
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm sub = MPI_COMM_NULL;  // blocking, like MPI_Comm_create: no timeout of its own
    check(MPI_Comm_split(comm_, color, key, &sub), "split");
    return std::make_unique<MpiCommunicator>(root_, sub);
  }

 private:
  MPI_Op sum_op(const torch::Tensor& t) const {
    return t.scalar_type() == torch::kBFloat16 ? bf16_sum_ : MPI_SUM;
  }

  void check(int rc, const char* what) {
    if (rc == MPI_SUCCESS) return;
    root_->failed_ = true;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    throw CommError(std::string("MPI ") + what + " failed: " + std::string(msg, len));
  }

  // Completes `req`; on an error or the timeout `buffers` (the collective's tensors) are
  // abandoned before the CommError is thrown.
  void wait(MPI_Request& req, const char* what, int64_t numel,
            std::initializer_list<torch::Tensor> buffers) {
    using Clock = std::chrono::steady_clock;
    const auto deadline = Clock::now() + timeout_;
    for (int spins = 0;; ++spins) {
      int done = 0;
      const int rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) abandon(buffers);
      check(rc, what);
      if (done) return;
      if (spins > 200)
        std::this_thread::sleep_for(std::chrono::microseconds(spins > 20000 ? 1000 : 50));
      if ((spins & 63) == 0 && Clock::now() > deadline) {
        root_->failed_ = true;
        abandon(buffers);
        throw CommError(
            std::string(what) + " of " + std::to_string(numel) +
            " elements did not complete within " + std::to_string(timeout_.count()) +
            " s (distributed.timeout_seconds): another rank died, hangs or took a different path");
      }
    }
  }

  // Holds its buffers until the collective completed: the caller's tensors may go first.
  struct InFlight final : Pending {
    InFlight(MpiCommunicator* c, const char* w, int64_t n, torch::Tensor o, torch::Tensor i)
        : comm(c), what(w), numel(n), out(std::move(o)), in(std::move(i)) {}
    void wait() override {
      if (!done) comm->wait(req, what, numel, {out, in});
      done = true;
    }
    ~InFlight() override {
      if (done) return;
      if (comm->root_
              ->failed_) {  // peers may be gone: no waiting, and MPI may still write into them
        comm->abandon({out, in});
        return;
      }
      try {
        comm->wait(req, what, numel, {out, in});
      } catch (const CommError&) {  // abandoned by wait
      }
    }
    MpiCommunicator* comm;
    const char* what;
    int64_t numel;
    torch::Tensor out, in;
    MPI_Request req = MPI_REQUEST_NULL;
    bool done = false;
  };

  // Keeps the buffers of a collective that failed or timed out alive (see the top of the file).
  void abandon(std::initializer_list<torch::Tensor> buffers) {
    for (const torch::Tensor& t : buffers)
      if (t.defined()) root_->abandoned_->push_back(t);
  }

  MPI_Comm comm_ = MPI_COMM_WORLD;
  int rank_ = 0, world_ = 1;
  MPI_Op bf16_sum_ = MPI_OP_NULL;
  std::chrono::seconds timeout_;
  MpiCommunicator* root_ = this;  // the world communicator (itself, unless split from it)
  bool failed_ = false;           // the root's: any collective of the job failed
  // Owned; left allocated when a collective failed (the destructor's comment says why).
  std::vector<torch::Tensor>* abandoned_ = new std::vector<torch::Tensor>();
};

}  // namespace

std::unique_ptr<Communicator> make_mpi(const DistEnv& env, const CommOptions& options) {
  return std::make_unique<MpiCommunicator>(env, options);
}

#else

std::unique_ptr<Communicator> make_mpi(const DistEnv&, const CommOptions&) {
  throw ConfigError(
      "this normlab was built without MPI (install libopenmpi-dev, tools/setup.sh, and rebuild)");
}

#endif

}  // namespace normlab::comm
