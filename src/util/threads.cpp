#include "gridtrain/util/threads.hpp"

#include <dlfcn.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include <ATen/Config.h>
#include <ATen/Parallel.h>

namespace gridtrain {
namespace {

int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return (end != v && *end == '\0' && n > 0) ? static_cast<int>(n) : 0;
}

}  // namespace

ThreadPlan plan_threads(MPI_Comm world) {
  MPI_Comm node;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int local_ranks = 1;
  MPI_Comm_size(node, &local_ranks);
  MPI_Comm_free(&node);

  if (int n = env_int("OMP_NUM_THREADS")) return {n, "OMP_NUM_THREADS"};
  if (int n = env_int("SLURM_CPUS_PER_TASK")) return {n, "SLURM_CPUS_PER_TASK"};
  cpu_set_t mask;
  int affinity = static_cast<int>(std::thread::hardware_concurrency());
  if (sched_getaffinity(0, sizeof mask, &mask) == 0) affinity = CPU_COUNT(&mask);
  const int hw = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int per_rank = std::max(1, hw / local_ranks);
  return {std::max(1, std::min(affinity, per_rank)),
          "cores: affinity " + std::to_string(affinity) + ", " + std::to_string(hw) + " on node / " +
              std::to_string(local_ranks) + " local ranks"};
}

void apply_threads(int threads) {
  at::set_num_threads(threads);
  // OpenBLAS keeps its own pool; it is reachable by name only when it is the loaded BLAS.
  using SetThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(threads);
}

BlasInfo detect_blas() {
  BlasInfo info;
#if AT_MKL_ENABLED()
  // This LibTorch carries MKL and calls it for sgemm, whatever libblas the process also loads.
  info.library = "Intel MKL (inside LibTorch)";
#else
  void* sym = dlsym(RTLD_DEFAULT, "sgemm_");
  Dl_info dl{};
  if (sym == nullptr || dladdr(sym, &dl) == 0 || dl.dli_fname == nullptr) return info;
  std::error_code ec;
  auto path = std::filesystem::canonical(dl.dli_fname, ec);
  info.library = ec ? dl.dli_fname : path.string();
  bool optimized = false;
  for (const char* name : {"openblas", "mkl", "blis", "atlas"})
    optimized = optimized || info.library.find(name) != std::string::npos;
  // A renamed optimized library still exports its own entry points from the same file.
  if (void* lib = dlopen(dl.dli_fname, RTLD_NOW | RTLD_NOLOAD)) {
    for (const char* entry : {"openblas_get_config", "mkl_get_version", "bli_info_get_version_str"})
      optimized = optimized || dlsym(lib, entry) != nullptr;
    dlclose(lib);
  }
  info.reference = !optimized;
#endif
  return info;
}

}  // namespace gridtrain
