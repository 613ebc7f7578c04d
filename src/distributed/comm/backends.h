// The engines behind make_communicator (communicator.h); one file each.
#pragma once

#include <memory>

#include "normlab/distributed/communicator.h"

namespace normlab::comm {

/// Open MPI over MPI_COMM_WORLD; initialises MPI (once per process) and checks that MPI's
/// rank and size agree with `env`.
std::unique_ptr<Communicator> make_mpi(const DistEnv& env, const CommOptions& options);

/// c10d ProcessGroupNCCL on `device` (a CUDA device with its index) with a TCPStore rendezvous
/// (rank 0 serves it, or torchrun's agent does). Throws std::invalid_argument in builds without
/// NCCL.
std::unique_ptr<Communicator> make_nccl(const DistEnv& env, const CommOptions& options,
                                        torch::Device device);

}  // namespace normlab::comm
