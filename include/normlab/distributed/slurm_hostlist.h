// Slurm's compressed host lists (SLURM_JOB_NODELIST): "gpu[003-007,010],cpu01" names gpu003 to
// gpu007, gpu010 and cpu01. Only the first host is needed: the rendezvous address of a
// multi-node job started by srun without MASTER_ADDR.
#pragma once

#include <string>

namespace normlab {

/// The first host of a Slurm host list: the first comma-separated entry (commas inside
/// brackets belong to the entry), each bracket replaced by the first number of its first
/// range with its zero padding ("gpu[003-007,010],cpu01" -> "gpu003",
/// "rack[2-3]-n[08-09]" -> "rack2-n08"). Throws DistributedError naming the list when it is
/// empty or malformed (an unclosed or empty bracket, a range bound that is not digits).
std::string slurm_first_host(const std::string& nodelist);

}  // namespace normlab
