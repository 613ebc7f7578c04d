// Launch safety (docs/distributed.md, "Launch safety"): the rank's GPU from the launcher's local
// rank and the visible devices, the rendezvous address of a multi-node Slurm job from its host
// list, and the ranks' agreement on what they run, with threads as ranks.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <mutex>

#include "normlab/distributed/agreement.h"
#include "normlab/distributed/communicator.h"
#include "normlab/distributed/slurm_hostlist.h"
#include "normlab/util/device.h"
#include "normlab/util/error.h"
#include "unit/distributed/thread_comm.h"

namespace normlab {
namespace {

using LaunchEnv = std::map<std::string, std::string>;

TEST(SlurmHostlist, FirstHostOfEveryForm) {
  EXPECT_EQ(slurm_first_host("gpu[003-007,010],cpu01"), "gpu003");
  EXPECT_EQ(slurm_first_host("node17"), "node17");
  EXPECT_EQ(slurm_first_host("cpu01,gpu[1-4]"), "cpu01");
  EXPECT_EQ(slurm_first_host("gpu[010,003-007]"), "gpu010");  // the list's order, not sorted
  EXPECT_EQ(slurm_first_host("gpu[7]"), "gpu7");
  EXPECT_EQ(slurm_first_host("rack[2-3]-n[08-09]"), "rack2-n08");
  EXPECT_EQ(slurm_first_host("n[1-2]-ib,login"), "n1-ib");
  EXPECT_EQ(slurm_first_host("a.b-c_d"), "a.b-c_d");
}

TEST(SlurmHostlist, MalformedListsNameTheList) {
  for (const std::string bad :
       {"", ",gpu1", "gpu[003-007", "gpu]3", "gpu[]", "gpu[a-b]", "gpu[1-]", "gpu[[1]]", "gpu 1"}) {
    const std::string e = test::error_message([&] { slurm_first_host(bad); });
    EXPECT_NE(e.find("Slurm host list '" + bad + "'"), std::string::npos) << bad << ": " << e;
  }
}

TEST(LaunchSafety, MasterAddrOfAMultiNodeSlurmJob) {
  const LaunchEnv slurm = {{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "16"}, {"SLURM_LOCALID", "3"}};
  LaunchEnv one = slurm;
  one["SLURM_JOB_NUM_NODES"] = "1";
  one["SLURM_JOB_NODELIST"] = "gpu007";
  EXPECT_EQ(dist_env_from(one).master_addr, "127.0.0.1");  // one node: this machine
  LaunchEnv two = slurm;
  two["SLURM_JOB_NUM_NODES"] = "2";
  two["SLURM_JOB_NODELIST"] = "gpu[003-004]";
  EXPECT_EQ(dist_env_from(two).master_addr, "gpu003");
  LaunchEnv older = slurm;  // SLURM_NNODES and SLURM_NODELIST (older Slurm names)
  older["SLURM_NNODES"] = "3";
  older["SLURM_NODELIST"] = "gpu[010,003-004]";
  EXPECT_EQ(dist_env_from(older).master_addr, "gpu010");
  LaunchEnv set = two;
  set["MASTER_ADDR"] = "10.0.0.5";
  EXPECT_EQ(dist_env_from(set).master_addr, "10.0.0.5");  // the user's choice wins
}

TEST(LaunchSafety, MultiNodeWithoutFirstNodeStopsTheNcclEngine) {
  LaunchEnv env = {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "16"}, {"SLURM_NNODES", "2"}};
  const DistEnv none = dist_env_from(env);
  EXPECT_EQ(none.master_addr, "");
  EXPECT_EQ(none.master_addr_problem,
            "MASTER_ADDR is not set in a Slurm job on several nodes (SLURM_NNODES=2) and neither "
            "SLURM_JOB_NODELIST nor SLURM_NODELIST names its first node: export "
            "MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -1) before srun");
  env["SLURM_JOB_NODELIST"] = "gpu[003-";
  const DistEnv bad = dist_env_from(env);
  EXPECT_EQ(bad.master_addr, "");
  EXPECT_NE(bad.master_addr_problem.find(
                "SLURM_JOB_NODELIST does not name its first node (Slurm host list 'gpu[003-': "),
            std::string::npos)
      << bad.master_addr_problem;
  CommOptions o;
  o.backend = CommBackend::Nccl;
  const std::string e =
      test::error_message([&] { make_communicator(none, o, torch::Device(torch::kCUDA, 0)); });
  EXPECT_EQ(e, none.master_addr_problem);  // never 127.0.0.1 on several nodes
}

GpuPlacement launch_placement(int local_rank, int world, LaunchEnv vars) {
  GpuPlacement p;
  p.local_rank = local_rank;
  p.world = world;
  p.vars = std::move(vars);
  return p;
}

TEST(LaunchSafety, TheRanksGpu) {
  EXPECT_EQ(choose_cuda_index(launch_placement(3, 8, {{"LOCAL_RANK", "3"}}), 8), 3);
  EXPECT_EQ(choose_cuda_index(launch_placement(0, 8, {{"LOCAL_RANK", "0"}}), 8), 0);
  // One visible device per rank (srun --gpus-per-task 1, CUDA_VISIBLE_DEVICES=<id>): device 0.
  EXPECT_EQ(choose_cuda_index(launch_placement(3, 8, {{"SLURM_LOCALID", "3"}}), 1), 0);
  EXPECT_EQ(choose_cuda_index(launch_placement(-1, 4, {}), 1), 0);
  EXPECT_EQ(choose_cuda_index(launch_placement(-1, 1, {}), 4), 0);  // one process, no launcher
  EXPECT_EQ(
      test::error_message([] {
        choose_cuda_index(
            launch_placement(3, 4, {{"LOCAL_RANK", "3"}, {"CUDA_VISIBLE_DEVICES", "0,1"}}), 2);
      }),
      "this rank's GPU: local rank 3 (LOCAL_RANK=3) but 2 CUDA devices are visible "
      "(CUDA_VISIBLE_DEVICES=0,1): start at most 2 ranks per node, or give each rank one device "
      "(srun --gpus-per-task 1, or CUDA_VISIBLE_DEVICES=<one id> per rank)");
  EXPECT_EQ(test::error_message([] { choose_cuda_index(launch_placement(-1, 2, {}), 4); }),
            "this rank's GPU: 4 CUDA devices are visible (CUDA_VISIBLE_DEVICES, "
            "SLURM_GPUS_PER_TASK, SLURM_STEP_GPUS unset) and the launcher gave no local rank "
            "(LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID unset) to this rank of 2: "
            "set LOCAL_RANK, or give each rank one device (CUDA_VISIBLE_DEVICES=<one id> per "
            "rank)");
  EXPECT_EQ(test::error_message([] {
              choose_cuda_index(launch_placement(0, 2, {{"CUDA_VISIBLE_DEVICES", ""}}), 0);
            }),
            "this rank's GPU: no CUDA device is visible to this process (CUDA_VISIBLE_DEVICES=)");
}

TEST(LaunchSafety, PlacementFromTheLaunchers) {
  const GpuPlacement torchrun = gpu_placement(dist_env_from(
      {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"CUDA_VISIBLE_DEVICES", "4,5"}}));
  EXPECT_EQ(torchrun.local_rank, 1);
  EXPECT_EQ(torchrun.world, 2);
  EXPECT_EQ(torchrun.vars.at("CUDA_VISIBLE_DEVICES"), "4,5");
  // RANK and WORLD_SIZE without LOCAL_RANK: no local rank (not a silent 0).
  EXPECT_EQ(gpu_placement(dist_env_from({{"RANK", "1"}, {"WORLD_SIZE", "2"}})).local_rank, -1);
  const GpuPlacement mpi = gpu_placement(dist_env_from({{"OMPI_COMM_WORLD_RANK", "5"},
                                                        {"OMPI_COMM_WORLD_SIZE", "8"},
                                                        {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}}));
  EXPECT_EQ(mpi.local_rank, 1);
  EXPECT_EQ(mpi.vars.at("OMPI_COMM_WORLD_LOCAL_RANK"), "1");
  const GpuPlacement slurm = gpu_placement(dist_env_from({{"SLURM_PROCID", "5"},
                                                          {"SLURM_NTASKS", "8"},
                                                          {"SLURM_LOCALID", "2"},
                                                          {"SLURM_GPUS_PER_TASK", "1"}}));
  EXPECT_EQ(slurm.local_rank, 2);
  EXPECT_EQ(slurm.vars.at("SLURM_GPUS_PER_TASK"), "1");
  EXPECT_EQ(gpu_placement(dist_env_from({})).local_rank, -1);
}

TEST(Agreement, ChecksumSeesEveryByteNameAndOrder) {
  torch::manual_seed(0);
  const torch::Tensor a = torch::randn({5, 7}), b = torch::randn({3});
  const std::string base = tensors_checksum({{"a", a}, {"b", b}});
  EXPECT_EQ(base.size(), 16u);
  EXPECT_EQ(tensors_checksum({{"a", a.clone()}, {"b", b.clone()}}), base);
  torch::Tensor nudged = a.clone();
  nudged[2][3] = std::nextafter(nudged[2][3].item<float>(), 1e9f);  // one bit of one element
  EXPECT_NE(tensors_checksum({{"a", nudged}, {"b", b}}), base);
  torch::Tensor swapped = a.clone().view(-1);
  swapped[0] = a.view(-1)[1].item<float>();
  swapped[1] = a.view(-1)[0].item<float>();
  EXPECT_NE(tensors_checksum({{"a", swapped.view({5, 7})}, {"b", b}}), base);  // same sum
  EXPECT_NE(tensors_checksum({{"b", b}, {"a", a}}), base);
  EXPECT_NE(tensors_checksum({{"a2", a}, {"b", b}}), base);
  for (const auto dtype : {torch::kBFloat16, torch::kDouble}) {
    const torch::Tensor c = a.to(dtype);
    torch::Tensor d = c.clone();
    d[0][0] = d[0][0] * 2;
    EXPECT_EQ(tensors_checksum({{"a", c}}), tensors_checksum({{"a", c.clone()}}));
    EXPECT_NE(tensors_checksum({{"a", c}}), tensors_checksum({{"a", d}}));
  }
  EXPECT_EQ(tensors_checksum({{"a", a.t()}}), tensors_checksum({{"a", a.t().contiguous()}}));
  EXPECT_EQ(text_hash("a"), "af63dc4c8601ec8c");  // FNV-1a 64 of "a"
}

// Each rank's error message (empty: no error), with threads as ranks.
std::vector<std::string> agree_on_ranks(int world,
                                        const std::function<std::vector<RankFact>(int)>& facts) {
  std::vector<std::string> errors(world);
  on_ranks(world, [&](int rank, Communicator& comm) {
    errors[rank] = test::error_message([&] { check_ranks_agree(comm, facts(rank), torch::kCPU); });
  });
  return errors;
}

std::vector<std::pair<std::string, torch::Tensor>> launch_weights(double bump) {
  return {{"w", torch::arange(6, torch::kFloat) + bump}, {"g", torch::ones({2})}};
}

TEST(Agreement, RanksThatAgreeGoOn) {
  SingleProcess one;
  const auto facts = launch_facts("model: {}\n", one, torch::kCPU, launch_weights(0));
  ASSERT_EQ(facts.size(), 6u);
  EXPECT_EQ(facts[3].value, "-");  // no NCCL
  EXPECT_EQ(facts[4].value, "cpu");
  for (const std::string& e : agree_on_ranks(3, [](int) {
         SingleProcess p;
         return launch_facts("model: {}\n", p, torch::kCPU, launch_weights(0));
       }))
    EXPECT_EQ(e, "");
}

TEST(Agreement, ADifferentConfigIsOneLineOnEveryRank) {
  const auto errors = agree_on_ranks(3, [](int rank) {
    SingleProcess p;
    return launch_facts(rank == 2 ? "optimizer: {lr: 0.002}\n" : "optimizer: {lr: 0.001}\n", p,
                        torch::kCPU, launch_weights(0));
  });
  const std::string want = "ranks disagree before training: config hash differs (rank 0 has " +
                           text_hash("optimizer: {lr: 0.001}\n") + ", rank 2 has " +
                           text_hash("optimizer: {lr: 0.002}\n") +
                           "; give every rank the same --config and --set)";
  for (const std::string& e : errors) EXPECT_EQ(e, want);
}

TEST(Agreement, EveryDifferenceIsNamedWithTheFirstRankAndTheOthers) {
  const auto errors = agree_on_ranks(4, [](int rank) {
    return std::vector<RankFact>{{"world size", "4", ""},
                                 {"torch version", rank == 1 ? "2.10.0" : "2.11.0", "same torch"},
                                 {"initial weights checksum",
                                  tensors_checksum(launch_weights(rank >= 2 ? 1.0 : 0.0)), "same"}};
  });
  const std::string want =
      "ranks disagree before training: torch version differs (rank 0 has 2.11.0, rank 1 has "
      "2.10.0; same torch); initial weights checksum differs (rank 0 has " +
      tensors_checksum(launch_weights(0)) + ", rank 2 has " + tensors_checksum(launch_weights(1)) +
      ", and 1 more ranks differ from rank 0; same)";
  for (const std::string& e : errors) EXPECT_EQ(e, want);
}

TEST(Agreement, LongValuesAreComparedOnTheirFirstBytes) {
  const std::string long_value(200, 'x');
  for (const std::string& e : agree_on_ranks(2, [&](int) {
         return std::vector<RankFact>{{"long", long_value, ""}};
       }))
    EXPECT_EQ(e, "");
}

}  // namespace
}  // namespace normlab
