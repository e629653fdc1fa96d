// The nccl backend (cuda build only). See comm/device_comm.hpp.
#include <cuda_runtime.h>
#include <nccl.h>

#include <array>
#include <stdexcept>
#include <string>
#include <vector>

#include "gridtrain/comm/device_comm.hpp"

namespace gridtrain {
namespace {

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e));
}

ncclDataType_t nccl_type(Element e) {
  switch (e) {
    case Element::BF16: return ncclBfloat16;
    case Element::F16: return ncclFloat16;
    case Element::F32: break;
  }
  return ncclFloat32;
}

// Waits for the operation's end event; then orders the compute stream after it.
class NcclPending : public Work::Pending {
 public:
  NcclPending(ncclComm_t comm, cudaEvent_t done) : comm_(comm), done_(done) {}
  ~NcclPending() override { cudaEventDestroy(done_); }
  bool test() override {
    const cudaError_t e = cudaEventQuery(done_);
    if (e == cudaSuccess) {
      check_cuda(cudaStreamWaitEvent(cudaStreamLegacy, done_, 0), "cudaStreamWaitEvent");
      return true;
    }
    if (e != cudaErrorNotReady) check_cuda(e, "cudaEventQuery");
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm_, &async);
    if (async != ncclSuccess && async != ncclInProgress)
      throw std::runtime_error(std::string("NCCL error: ") + ncclGetErrorString(async));
    return false;
  }

 private:
  ncclComm_t comm_;
  cudaEvent_t done_;
};

// Three lanes, each an NCCL communicator over the axis with its own non-blocking stream:
// collectives, point-to-point messages to higher ranks, and to lower ranks. NCCL send/recv block
// their stream until the peer's matching call, so one stream for both directions deadlocks
// 1F1B (a stage's next activation send queued behind a gradient receive that waits for the
// neighbour, whose stream holds the receive of that activation behind its own gradient send);
// with a lane per direction each stream only ever waits for its own direction.
class NcclComm : public DeviceComm {
 public:
  NcclComm(MPI_Comm comm, const std::string& axis) : axis_(axis) {
    MPI_Comm_size(comm, &size_);
    MPI_Comm_rank(comm, &rank_);
    for (Lane& lane : lanes_) {
      ncclUniqueId id;
      if (rank_ == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
      MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, comm);
      check(ncclCommInitRank(&lane.comm, size_, id, rank_), "ncclCommInitRank");
      check_cuda(cudaStreamCreateWithFlags(&lane.stream, cudaStreamNonBlocking), "cudaStreamCreate");
    }
    check_cuda(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreate");
  }
  ~NcclComm() override {
    for (Lane& lane : lanes_) {
      cudaStreamSynchronize(lane.stream);
      ncclCommDestroy(lane.comm);
      cudaStreamDestroy(lane.stream);
    }
    cudaEventDestroy(ready_);
  }

  Op allreduce_sum(void* data, std::size_t n, Element type) override {
    return run(kCollective, [&](const Lane& l) { return ncclAllReduce(data, data, n, nccl_type(type), ncclSum, l.comm, l.stream); });
  }
  Op allreduce_max(float* data, std::size_t n) override {
    return run(kCollective, [&](const Lane& l) { return ncclAllReduce(data, data, n, ncclFloat32, ncclMax, l.comm, l.stream); });
  }
  Op reduce_scatter_sum(const void* in, void* out, std::size_t n, Element type) override {
    return run(kCollective, [&](const Lane& l) { return ncclReduceScatter(in, out, n, nccl_type(type), ncclSum, l.comm, l.stream); });
  }
  Op all_gather(const void* in, void* out, std::size_t bytes) override {
    return run(kCollective, [&](const Lane& l) { return ncclAllGather(in, out, bytes, ncclUint8, l.comm, l.stream); });
  }
  Op broadcast(void* data, std::size_t bytes, int root) override {
    return run(kCollective, [&](const Lane& l) { return ncclBroadcast(data, data, bytes, ncclUint8, root, l.comm, l.stream); });
  }
  Op all_to_all(const void* in, void* out, std::size_t bytes) override {
    return run(kCollective, [&](const Lane& l) {
      ncclGroupStart();
      for (int r = 0; r < size_; ++r) {
        ncclSend(static_cast<const char*>(in) + r * bytes, bytes, ncclUint8, r, l.comm, l.stream);
        ncclRecv(static_cast<char*>(out) + r * bytes, bytes, ncclUint8, r, l.comm, l.stream);
      }
      return ncclGroupEnd();
    });
  }
  Op all_to_all_v(const void* in, const std::vector<std::int64_t>& send_rows, void* out,
                  const std::vector<std::int64_t>& recv_rows, std::size_t row_bytes) override {
    return run(kCollective, [&](const Lane& l) {
      std::size_t sent = 0, received = 0;
      ncclGroupStart();
      for (int r = 0; r < size_; ++r) {
        const auto s = static_cast<std::size_t>(send_rows[r]) * row_bytes, g = static_cast<std::size_t>(recv_rows[r]) * row_bytes;
        ncclSend(static_cast<const char*>(in) + sent, s, ncclUint8, r, l.comm, l.stream);
        ncclRecv(static_cast<char*>(out) + received, g, ncclUint8, r, l.comm, l.stream);
        sent += s, received += g;
      }
      return ncclGroupEnd();
    });
  }
  Op send(const void* data, std::size_t bytes, int peer) override {
    return run(peer > rank_ ? kUp : kDown, [&](const Lane& l) { return ncclSend(data, bytes, ncclUint8, peer, l.comm, l.stream); });
  }
  Op recv(void* data, std::size_t bytes, int peer) override {
    return run(peer < rank_ ? kUp : kDown, [&](const Lane& l) { return ncclRecv(data, bytes, ncclUint8, peer, l.comm, l.stream); });
  }

 private:
  struct Lane {
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
  };
  enum { kCollective, kUp, kDown };  // kUp: messages from lower to higher ranks

  void check(ncclResult_t r, const char* what) const {
    if (r != ncclSuccess)
      throw std::runtime_error("NCCL error on axis " + axis_ + " in " + what + ": " + ncclGetErrorString(r));
  }

  // The lane's stream waits for what the compute stream queued (the gradients), runs the NCCL
  // call, and records the event its Work completes on.
  template <class Call>
  Op run(int which, Call&& call) {
    const Lane& lane = lanes_[which];
    check_cuda(cudaEventRecord(ready_, cudaStreamLegacy), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(lane.stream, ready_, 0), "cudaStreamWaitEvent");
    check(call(lane), "NCCL call");
    cudaEvent_t done;
    check_cuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaEventRecord(done, lane.stream), "cudaEventRecord");
    return std::make_unique<NcclPending>(lane.comm, done);
  }

  std::string axis_;
  int size_ = 1, rank_ = 0;
  Lane lanes_[3];
  cudaEvent_t ready_ = nullptr;
};

}  // namespace

std::string device_build() {
  return "CUDA " + std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10) +
         " and NCCL " + std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR) + "." +
         std::to_string(NCCL_PATCH) + " (GPU build)";
}

int cuda_device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

int select_cuda_device(MPI_Comm world, bool exclusive) {
  // The collective parts run on every rank before anything can throw, so that callers can
  // agree() on the outcome.
  MPI_Comm node;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int local = 0, local_ranks = 1;
  MPI_Comm_rank(node, &local);
  MPI_Comm_size(node, &local_ranks);
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  const int device = n > 0 ? local % n : -1;
  // Which physical GPU each rank of the node gets: with per-rank binding (Slurm --gpus-per-task,
  // CUDA_VISIBLE_DEVICES per rank) every rank sees "device 0", but each a different one.
  std::array<char, 64> bus{}, mine{};
  if (device >= 0) cudaDeviceGetPCIBusId(mine.data(), static_cast<int>(mine.size()), device);
  std::vector<char> all(bus.size() * static_cast<std::size_t>(local_ranks));
  MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_CHAR, all.data(), static_cast<int>(mine.size()),
                MPI_CHAR, node);
  MPI_Comm_free(&node);
  if (e != cudaSuccess || n == 0)
    throw std::runtime_error(std::string("no CUDA device visible (") + (e == cudaSuccess ? "0 devices" : cudaGetErrorString(e)) +
                             "); use train.device = cpu");
  int sharing = 0;  // ranks of this node on this rank's GPU
  for (int r = 0; r < local_ranks; ++r)
    sharing += std::string(&all[static_cast<std::size_t>(r) * bus.size()]) == std::string(mine.data()) ? 1 : 0;
  if (exclusive && sharing > 1)
    throw std::runtime_error(std::to_string(sharing) + " ranks on this node share the CUDA device " +
                             std::string(mine.data()) + " (" + std::to_string(local_ranks) + " ranks, " +
                             std::to_string(n) + " visible device(s) each), and NCCL needs a GPU of its own per "
                             "rank; launch at most one rank per GPU (srun --gpus-per-task=1, or mpirun with at most " +
                             std::to_string(n) + " ranks per node) or use train.device = cpu");
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  return device;
}

// The compute stream only: the NCCL streams' sends and receives may wait for a peer that is
// itself waiting here (a deadlock), and their completion is the Work handles' job, under
// comm.timeout_s.
void synchronize_device() { check_cuda(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize"); }

std::unique_ptr<DeviceComm> make_nccl_comm(MPI_Comm comm, const std::string& axis) {
  return std::make_unique<NcclComm>(comm, axis);
}

}  // namespace gridtrain
