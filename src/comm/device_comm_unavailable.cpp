// The CPU build's stand-ins for comm/device_comm.hpp: no device, and a clear error for anything
// that asks for one.
#include <stdexcept>

#include "gridtrain/comm/device_comm.hpp"

namespace gridtrain {
namespace {

[[noreturn]] void no_cuda(const std::string& what) {
  throw std::runtime_error(what + " needs the GPU build of gridtrain (configure where nvcc is found, or with "
                           "-DGRIDTRAIN_CUDA=ON); this one was built for CPU only");
}

}  // namespace

std::string device_build() { return "CPU build (no CUDA, no NCCL)"; }

int cuda_device_count() { return 0; }

int select_cuda_device(MPI_Comm, bool) { no_cuda("train.device = cuda"); }

void synchronize_device() {}

std::unique_ptr<DeviceComm> make_nccl_comm(MPI_Comm, const std::string& axis) {
  no_cuda("comm.backend = nccl (axis " + axis + ")");
}

}  // namespace gridtrain
