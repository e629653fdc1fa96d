#include "gridtrain/app/build_info.hpp"

#include <hdf5.h>
#include <mpi.h>
#include <torch/version.h>

#include "gridtrain/comm/device_comm.hpp"
#include "gridtrain/git_commit.hpp"
#include "gridtrain/util/threads.hpp"
#include "gridtrain/version.hpp"

namespace gridtrain {
namespace {

std::string mpi_library() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = "";
  int length = 0, major = 0, minor = 0;
  MPI_Get_library_version(text, &length);
  MPI_Get_version(&major, &minor);
  std::string name(text, static_cast<std::size_t>(length));
  name = name.substr(0, name.find_first_of(",\n"));  // "Open MPI v4.1.4, package: ..." → its first part
  return name + " (MPI " + std::to_string(major) + "." + std::to_string(minor) + ")";
}

std::string hdf5_library() {
  unsigned major = 0, minor = 0, release = 0;
  H5get_libversion(&major, &minor, &release);
#ifdef H5_HAVE_PARALLEL
  const char* kind = "parallel (MPI-IO)";
#else
  const char* kind = "serial";
#endif
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release) + ", " + kind;
}

std::string compiler() {
#if defined(__clang__)
  return "Clang " __clang_version__;
#elif defined(__GNUC__)
  return "GCC " __VERSION__;
#else
  return "unknown";
#endif
}

}  // namespace

std::string build_info() {
  const BlasInfo blas = detect_blas();
  return std::string("gridtrain ") + kVersion + " (git " + GRIDTRAIN_GIT_COMMIT + ")\n" +
         "LibTorch: " + TORCH_VERSION + "\n" +
         "Devices: " + device_build() + "\n" +
         "MPI: " + mpi_library() + "\n" +
         "HDF5: " + hdf5_library() + "\n" +
         "BLAS: " + (blas.library.empty() ? std::string("unknown") : blas.library) + "\n" +
         "Compiler: " + compiler() + ", C++" + std::to_string(__cplusplus / 100 % 100) + "\n";
}

}  // namespace gridtrain
