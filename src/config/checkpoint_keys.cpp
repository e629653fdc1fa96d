// The [checkpoint] keys: the HDF5 checkpoints, the local levels, and resuming.
#include "checkpoint_keys.hpp"

#include "key_makers.hpp"

namespace gridtrain::detail {
namespace {

// checkpoint.resume: none, auto or a path.
Key resume_key(std::string help) {
  return {{"checkpoint.resume", "none", std::move(help), "none, auto or a path"},
          [](Config& c, const std::string& text) -> std::optional<std::string> {
            if (text.empty()) return "empty; valid: none, auto or a path";
            using Mode = Resume::Mode;
            c.checkpoint.resume = {text == "none" ? Mode::None : text == "auto" ? Mode::Auto : Mode::Path,
                                   text == "none" || text == "auto" ? "" : text};
            return std::nullopt;
          },
          [](const Config& c) {
            const Resume& r = c.checkpoint.resume;
            return r.mode == Resume::Mode::Path ? r.path : r.mode == Resume::Mode::Auto ? "auto" : "none";
          }};
}

}  // namespace

std::vector<Key> checkpoint_keys() {
  return {
      text_key("checkpoint.dir", GT_REF(checkpoint.dir),
               "directory of step-XXXXXXXX.h5 checkpoints and the `latest` pointer; none = no checkpoints"),
      int_key<int>("checkpoint.interval", GT_REF(checkpoint.interval),
                   "steps between checkpoints; 0 = only after the last step", 0),
      int_key<int>("checkpoint.keep_last", GT_REF(checkpoint.keep_last),
                   "checkpoints of this run kept; older ones of this run are deleted (never another run's, nor "
                   "one newer than the checkpoint this run started from)", 1),
      bool_key("checkpoint.async", GT_REF(checkpoint.async),
               "write checkpoints in the background; the step loop pays only for a host copy"),
      resume_key("none; auto (checkpoint.dir's newest checkpoint that passes its checksums, `latest` first; start "
                 "fresh only where there is no checkpoint file); a checkpoint file, a directory of them, or a "
                 "`latest` pointer. --restart PATH sets it"),
      text_key("checkpoint.init_from", GT_REF(checkpoint.init_from),
               "none, or a checkpoint file whose weights a fresh run starts from (fine-tuning: a fresh optimizer, "
               "step 0, any layout; `gridtrain import` writes such files from transformers models); a run that "
               "resumes continues from its own checkpoint instead"),
      text_key("checkpoint.local_dir", GT_REF(checkpoint.local_dir),
               "node-local directory of the local levels (node memory or a node-local SSD): auto = "
               "/dev/shm/gridtrain-$SLURM_JOB_ID, outside Slurm /dev/shm/gridtrain-$USER"),
      int_key<int>("checkpoint.local_interval", GT_REF(checkpoint.local_interval),
                   "steps between local checkpoints: each rank's part into checkpoint.local_dir and (checkpoint.partner) "
                   "a copy on its partner's node; the newest two are kept. checkpoint.interval's go to checkpoint.dir as "
                   "before. 0 = none", 0),
      bool_key("checkpoint.partner", GT_REF(checkpoint.partner),
               "with checkpoint.local_interval: send each rank's local part to rank (R + ranks per node) mod world, "
               "on the next node, which keeps it (a node's loss is then recovered from its partner's memory)"),
      int_key<int>("checkpoint.ranks_per_node", GT_REF(checkpoint.ranks_per_node),
                   "ranks per node for the partner copies; 0 = MPI's node-local split (MPI_COMM_TYPE_SHARED). Set it to "
                   "simulate several nodes on one host", 0),
  };
}

}  // namespace gridtrain::detail
