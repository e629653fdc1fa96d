// The checkpoint directory: file names, the `latest` pointer, choosing what to resume from, and
// deleting old checkpoints without touching another run's.
//
//   DIR/step-00000010.h5       one checkpoint (checkpoint_file.hpp), root attribute run_id
//   DIR/step-00000010.h5.tmp   a write in progress, or one that a crash interrupted
//   DIR/latest                 text: the file name of the newest committed checkpoint
//   DIR/latest.tmp             `latest` being replaced
//
// A checkpoint is committed when it has been renamed from .tmp; `latest` is a convenience that
// can be lost (a full disk while it is replaced, a user's rm): resolution never trusts it alone.
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <mpi.h>

#include "gridtrain/config/config.hpp"

namespace gridtrain {

/// "step-00000010.h5" for step 10.
std::string checkpoint_name(long long step);
/// The step of a checkpoint file name step-<digits>.h5, or -1 for any other name (a .tmp, latest).
long long checkpoint_step(const std::filesystem::path& p);
/// Committed checkpoint files in dir, newest (highest step) first; none when dir does not exist.
std::vector<std::filesystem::path> list_checkpoints(const std::filesystem::path& dir);

/// Why path cannot be resumed from, or nullopt when it can: it exists, is HDF5, is a gridtrain
/// checkpoint of this format version, and every dataset passes its xsum64 checksum. The datasets
/// are verified round-robin over the ranks of comm (each rank reads its whole datasets), so the
/// check costs one read of the file spread over the job. Collective over comm.
std::optional<std::string> checkpoint_problem(const std::string& path, MPI_Comm comm);

/// What to resume from, and why (for the log).
struct ResumeChoice {
  std::string path;
  std::string reason;
  bool scanned = false;  ///< chosen from a directory's files: any later one of its run failed its checks
};

/// checkpoint.resume resolved against checkpoint.dir. Collective over comm.
///  - none: nullopt.
///  - auto (D = dir) or a directory D: the newest checkpoint of D's run that passes
///    checkpoint_problem(). D's run is the run_id of the file `latest` names, or without a
///    usable `latest` (missing, empty, unreadable, naming a missing or truncated file) the one
///    run D's step files belong to. Its files newer than `latest`'s come first, then `latest`'s,
///    then the older ones; the reason says why the choice is not `latest`'s and names the other
///    runs' files skipped (never adopted). nullopt when D holds no checkpoint file at all.
///  - a `latest` pointer file that names a checkpoint: its directory resolved as above (the
///    pointer's run; a newer complete checkpoint of that run than the one a stale pointer names
///    is taken, and the reason says so).
///  - any other path F: that file (load() verifies it) — except in a requeued Slurm job
///    (SLURM_RESTART_COUNT > 0) whose earlier attempt, started from F, wrote checkpoints into
///    dir: those record this job (slurm_job) and are F's run continued or a branch of it at F's
///    step (branched_from). The newest of them that passes checkpoint_problem() is chosen (with
///    `scanned`: the job continues its own lineage, it does not branch from F again).
/// Throws gridtrain::Error when D holds checkpoint files but none of its run passes (each named
/// with its problem), when without a usable `latest` its files belong to several runs (each
/// named with its files), or a pointer names nothing: starting fresh, or guessing, there would
/// lose or mix runs.
std::optional<ResumeChoice> choose_resume(const Resume& from, const std::string& dir, MPI_Comm comm);

/// The Slurm job this process belongs to, as recorded in its checkpoints (root attribute
/// slurm_job): "<SLURM_CLUSTER_NAME>:<SLURM_JOB_ID>", or SLURM_JOB_ID alone when the cluster name
/// is unset; "" outside Slurm. Local (this process's environment).
std::string slurm_job_identity();
/// How often an earlier attempt of this Slurm job ran: SLURM_RESTART_COUNT (requeues) plus
/// GRIDTRAIN_RELAUNCH (slurm/gridtrain.sbatch's relaunches inside the allocation); 0 on its first
/// start and outside Slurm. Local.
long long slurm_restart_count();

/// A new run id: 64 random bits as 16 hex digits, enough to tell two runs' files apart. Local.
std::string random_run_id();

/// The run a checkpoint belongs to (its root attribute run_id), or "" when it has none or
/// cannot be read. Local (serial HDF5 open).
std::string checkpoint_run(const std::filesystem::path& path);

/// Who wrote a checkpoint: its root attributes run_id, branched_from ("<run>@<step>"), slurm_job
/// and step; "" (step -1) for those it lacks or when it cannot be read. Local (serial HDF5 open).
struct CheckpointOrigin {
  std::string run_id, branched_from, slurm_job;
  long long step = -1;
};
CheckpointOrigin checkpoint_origin(const std::filesystem::path& path);

}  // namespace gridtrain
