// What this gridtrain is built from and runs on, for `gridtrain --version` and the head of every
// run's log: what a bug report needs.
#pragma once
#include <string>

namespace gridtrain {

/// Lines (each ending in '\n'): gridtrain's version and git commit; LibTorch; CUDA and NCCL, or
/// "CPU build"; the MPI library and the MPI standard version; HDF5 and whether it is parallel;
/// the BLAS LibTorch calls; the compiler. Needs MPI initialised.
std::string build_info();

}  // namespace gridtrain
