// The nccl backend (cuda build only). See comm/device_comm.hpp.
#include <cuda_runtime.h>
#include <nccl.h>

#include <stdexcept>

#include "gridtrain/comm/device_comm.hpp"

namespace gridtrain {
namespace {

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e));
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

class NcclComm : public DeviceComm {
 public:
  NcclComm(MPI_Comm comm, const std::string& axis) : axis_(axis) {
    MPI_Comm_size(comm, &size_);
    MPI_Comm_rank(comm, &rank_);
    ncclUniqueId id;
    if (rank_ == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, comm);
    check(ncclCommInitRank(&comm_, size_, id, rank_), "ncclCommInitRank");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check_cuda(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreate");
  }
  ~NcclComm() override {
    cudaStreamSynchronize(stream_);
    ncclCommDestroy(comm_);
    cudaEventDestroy(ready_);
    cudaStreamDestroy(stream_);
  }

  Op allreduce_sum(float* data, std::size_t n) override {
    return run([&] { return ncclAllReduce(data, data, n, ncclFloat32, ncclSum, comm_, stream_); });
  }
  Op allreduce_max(float* data, std::size_t n) override {
    return run([&] { return ncclAllReduce(data, data, n, ncclFloat32, ncclMax, comm_, stream_); });
  }
  Op reduce_scatter_sum(const float* in, float* out, std::size_t n) override {
    return run([&] { return ncclReduceScatter(in, out, n, ncclFloat32, ncclSum, comm_, stream_); });
  }
  Op all_gather(const void* in, void* out, std::size_t bytes) override {
    return run([&] { return ncclAllGather(in, out, bytes, ncclUint8, comm_, stream_); });
  }
  Op broadcast(void* data, std::size_t bytes, int root) override {
    return run([&] { return ncclBroadcast(data, data, bytes, ncclUint8, root, comm_, stream_); });
  }
  Op all_to_all(const void* in, void* out, std::size_t bytes) override {
    return run([&] {
      ncclGroupStart();
      for (int r = 0; r < size_; ++r) {
        ncclSend(static_cast<const char*>(in) + r * bytes, bytes, ncclUint8, r, comm_, stream_);
        ncclRecv(static_cast<char*>(out) + r * bytes, bytes, ncclUint8, r, comm_, stream_);
      }
      return ncclGroupEnd();
    });
  }
  Op send(const void* data, std::size_t bytes, int peer) override {
    return run([&] { return ncclSend(data, bytes, ncclUint8, peer, comm_, stream_); });
  }
  Op recv(void* data, std::size_t bytes, int peer) override {
    return run([&] { return ncclRecv(data, bytes, ncclUint8, peer, comm_, stream_); });
  }

 private:
  void check(ncclResult_t r, const char* what) const {
    if (r != ncclSuccess)
      throw std::runtime_error("NCCL error on axis " + axis_ + " in " + what + ": " + ncclGetErrorString(r));
  }

  // The axis stream waits for what the compute stream queued (the gradients), runs the NCCL
  // call, and records the event its Work completes on.
  template <class Call>
  Op run(Call&& call) {
    check_cuda(cudaEventRecord(ready_, cudaStreamLegacy), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(stream_, ready_, 0), "cudaStreamWaitEvent");
    check(call(), "collective");
    cudaEvent_t done;
    check_cuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaEventRecord(done, stream_), "cudaEventRecord");
    return std::make_unique<NcclPending>(comm_, done);
  }

  std::string axis_;
  int size_ = 1, rank_ = 0;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;
};

}  // namespace

bool cuda_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

int select_cuda_device(MPI_Comm world) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0)
    throw std::runtime_error(std::string("no CUDA device visible (") + (e == cudaSuccess ? "0 devices" : cudaGetErrorString(e)) +
                             "); use train.device = cpu");
  MPI_Comm node;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int local = 0;
  MPI_Comm_rank(node, &local);
  MPI_Comm_free(&node);
  const int device = local % n;
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  return device;
}

std::unique_ptr<DeviceComm> make_nccl_comm(MPI_Comm comm, const std::string& axis) {
  return std::make_unique<NcclComm>(comm, axis);
}

}  // namespace gridtrain
