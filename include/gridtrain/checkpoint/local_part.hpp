// One rank's part of a local checkpoint (multi-level checkpointing, as SCR's PARTNER level):
// the bytes of every tensor the rank holds, its per-rank state and the step's position, in one
// image that goes to node memory (checkpoint.local_dir) and to the partner rank's node.
//
//   LOCAL/run-<run_id>/step-00000040/rank-00003.part              rank 3's own copy
//   LOCAL/run-<run_id>/step-00000040/rank-00003.partner-00005.part rank 3's part, held by rank 5
//   ... .part.tmp                                                    a write in progress
//
// An image: the 8 bytes "GTPART01", a little-endian u64 header length, the header (JSON: the
// PartHeader fields and the blobs' names and byte counts, in payload order), the payload, zero
// padding to a multiple of 4 bytes, then the u64 xsum64 (checkpoint_file.hpp) of everything
// before it read as 32-bit words. Layout and rules: docs/checkpoint-format.md, Local levels.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <mpi.h>

namespace gridtrain {

/// What a part says about itself: whose it is, of which step, and whether this run may take it.
/// (The step guard's and sampler's TrainState travel as blobs "/train/<name>": exact bits.)
struct PartHeader {
  std::string run_id, branched_from, slurm_job;  ///< the lineage that wrote it
  std::string checkpoint_dir;  ///< its checkpoint.dir, absolute: whose lineage the part continues
  long long step = 0;                            ///< optimizer steps completed
  int rank = 0, world = 0;                       ///< owner rank, of world ranks
  std::string fingerprint;  ///< what must equal the resuming run's (Checkpointer: grid, tensors, data)
  std::uint64_t sample_index = 0, epoch = 0;
  long long optim_steps = 0;
  std::string optim_type, tokenizer_name;
};

/// An image being built or read: header, then named blobs one after another.
class PartImage {
 public:
  /// Lays out an image of these blobs (name, bytes) after header; their bytes are then written
  /// through blob(i) before seal().
  void begin(const PartHeader& header, const std::vector<std::pair<std::string, std::size_t>>& blobs);
  unsigned char* blob(std::size_t i);
  /// Pads and appends the checksum: the image is complete.
  void seal();
  const std::vector<unsigned char>& bytes() const { return bytes_; }
  std::vector<unsigned char>& buffer() { return bytes_; }  ///< for a received or read image

  /// Checks magic, header and checksum of a received or read image and indexes its blobs.
  /// Throws std::runtime_error saying which check failed.
  void parse();
  const PartHeader& header() const { return header_; }
  /// The bytes of blob `name` of a parsed image; throws std::runtime_error when it has none.
  std::pair<const unsigned char*, std::size_t> find(const std::string& name) const;
  /// The names of a parsed image's blobs, in payload order.
  std::vector<std::string> names() const;

 private:
  std::vector<unsigned char> bytes_;
  PartHeader header_;
  std::vector<std::pair<std::string, std::pair<std::size_t, std::size_t>>> blobs_;  // name → (offset, size)
};

/// LOCAL/run-<run_id>/step-XXXXXXXX.
std::filesystem::path local_step_dir(const std::filesystem::path& local, const std::string& run_id, long long step);
/// "rank-00003.part" (holder = owner) or "rank-00003.partner-00005.part".
std::string part_name(int owner, int holder);
/// A part file's owner and holder from its name, or {-1, -1} for any other name.
std::pair<int, int> part_ranks(const std::filesystem::path& p);

/// The rank that keeps rank's partner copy: (rank + ranks_per_node) mod world, a rank on the
/// next node when ranks are placed on nodes in blocks of ranks_per_node.
int partner_of(int rank, int world, int ranks_per_node);

/// Sends `out` to dest while receiving from source into `in` (resized to what source sends), in
/// chunks of at most 1 GiB. Collective over the pairs of comm that exchange.
void exchange_bytes(MPI_Comm comm, const std::vector<unsigned char>& out, int dest, std::vector<unsigned char>& in,
                    int source);
/// Posts the nonblocking transfers of `bytes` (send) or into `bytes` (receive; sized by the
/// caller) to/from peer, in chunks of at most 1 GiB tagged tag, tag + 1, ...; appends the
/// requests to reqs, for MPI_Waitall.
void post_send(MPI_Comm comm, const std::vector<unsigned char>& bytes, int peer, int tag, std::vector<MPI_Request>& reqs);
void post_recv(MPI_Comm comm, std::vector<unsigned char>& bytes, int peer, int tag, std::vector<MPI_Request>& reqs);

/// Writes bytes to path (through path.tmp and a rename: a kill leaves no partial part under its
/// name). No fsync: node memory does not outlive the node, whose loss the partner copy covers.
/// Throws std::system_error naming the file and the OS error.
void write_part_file(const std::filesystem::path& path, const std::vector<unsigned char>& bytes);
/// The whole file into out. Throws std::system_error naming the file and the OS error.
void read_part_file(const std::filesystem::path& path, std::vector<unsigned char>& out);

}  // namespace gridtrain
