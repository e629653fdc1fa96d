// Threads per rank and the BLAS library behind LibTorch.
//
// Each rank runs as many intra-op (ATen/OpenMP) and BLAS threads as cores it may use, so that
// 2 ranks on 2 cores run 2 threads, not 4. Precedence: OMP_NUM_THREADS, then
// SLURM_CPUS_PER_TASK, then min(cores in this process's affinity mask,
// hardware cores / ranks on this node).
#pragma once
#include <string>

#include <mpi.h>

namespace gridtrain {

struct ThreadPlan {
  int threads = 1;
  std::string source;  ///< which rule decided, for the log
};

/// Collective over world (counts the ranks sharing this node).
ThreadPlan plan_threads(MPI_Comm world);

/// Sets ATen intra-op threads and, when the BLAS is OpenBLAS, its thread count.
void apply_threads(int threads);

struct BlasInfo {
  std::string library;     ///< what serves LibTorch's sgemm: MKL inside it, or the path of the sgemm_ library
  bool reference = false;  ///< that library looks like the slow Netlib reference BLAS (confirm by timing it)
};

/// Finds which library serves LibTorch's sgemm: MKL when LibTorch was built with it (PyPI's),
/// else the library that provides sgemm_ (Debian's LibTorch calls the system BLAS).
BlasInfo detect_blas();

}  // namespace gridtrain
