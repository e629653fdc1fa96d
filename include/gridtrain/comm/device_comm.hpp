// The `nccl` backend of an Axis: NCCL communicators per axis, created by broadcasting an
// ncclUniqueId over the axis's MPI communicator (one for collectives and one per direction of
// point-to-point traffic, so that a pipeline's activations and gradients never queue behind
// each other), each with a dedicated CUDA stream, and events that order them against the
// compute stream (CUDA's legacy default stream, LibTorch's default): each operation first waits
// for the work queued on the compute stream, and its Work completes (Work::test) after making
// the compute stream wait for the operation's end.
//
// Only a build with the GPU path (GRIDTRAIN_CUDA) implements it; a CPU-only build's factory throws.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <mpi.h>

#include "gridtrain/comm/axis.hpp"
#include "gridtrain/comm/compressor.hpp"

namespace gridtrain {

/// Device-buffer collectives of one axis; same meaning and sizes as Axis's operations.
/// Point-to-point messages between a pair of ranks are matched in issue order (NCCL has no tags).
class DeviceComm {
 public:
  using Op = std::unique_ptr<Work::Pending>;
  virtual ~DeviceComm() = default;
  virtual Op allreduce_sum(void* data, std::size_t n, Element type) = 0;
  virtual Op allreduce_max(float* data, std::size_t n) = 0;
  virtual Op reduce_scatter_sum(const void* in, void* out, std::size_t n, Element type) = 0;
  virtual Op all_gather(const void* in, void* out, std::size_t bytes) = 0;
  virtual Op broadcast(void* data, std::size_t bytes, int root) = 0;
  virtual Op all_to_all(const void* in, void* out, std::size_t bytes) = 0;
  virtual Op all_to_all_v(const void* in, const std::vector<std::int64_t>& send_rows, void* out,
                          const std::vector<std::int64_t>& recv_rows, std::size_t row_bytes) = 0;
  virtual Op send(const void* data, std::size_t bytes, int peer) = 0;
  virtual Op recv(void* data, std::size_t bytes, int peer) = 0;
};

/// What this build has for devices, for --version: "CUDA 13.0 and NCCL 2.28.9 (GPU build)" (the
/// CUDA runtime and NCCL it was built against), or that it is a CPU build.
std::string device_build();
/// CUDA devices visible to this process (0 in a CPU build).
int cuda_device_count();
/// Whether this build has the GPU path and at least one CUDA device is visible.
inline bool cuda_available() { return cuda_device_count() > 0; }

/// Picks this rank's CUDA device (node-local rank modulo the visible devices), makes it
/// current and returns its index. Collective over world (its collective part runs before any
/// throw, so callers can agree() on the outcome). Throws std::runtime_error without a device, in
/// a CPU build, and with `exclusive` (NCCL) when another rank of the node got the same physical
/// GPU (same PCI bus id; per-rank binding that shows every rank one device is fine).
int select_cuda_device(MPI_Comm world, bool exclusive = false);

/// Waits for the work queued on the compute stream (output.timer = sync); communication on the
/// NCCL streams is left to its Work handles. A no-op in a CPU build.
void synchronize_device();

/// Creates the NCCL communicator over `comm` (collective over it) on the current device.
/// Throws std::runtime_error naming the axis when NCCL fails, and in a CPU build.
std::unique_ptr<DeviceComm> make_nccl_comm(MPI_Comm comm, const std::string& axis);

}  // namespace gridtrain
