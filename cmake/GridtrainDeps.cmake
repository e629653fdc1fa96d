# Third-party packages. Each failure says which package provides what is missing.

find_package(Torch REQUIRED)  # Debian libtorch-dev, or any LibTorch via CMAKE_PREFIX_PATH
# Every target shares std::string/STL types with LibTorch code, so every target needs its ABI
# flags (a pip LibTorch may use _GLIBCXX_USE_CXX11_ABI=0).
add_compile_options(${TORCH_CXX_FLAGS})

find_package(MPI REQUIRED COMPONENTS C)
# We use the C API only; keep the deprecated MPI C++ bindings out of every translation unit.
add_compile_definitions(OMPI_SKIP_MPICXX=1 MPICH_SKIP_MPICXX=1)

set(HDF5_PREFER_PARALLEL TRUE)
find_package(HDF5 REQUIRED COMPONENTS C)
if(NOT HDF5_IS_PARALLEL)
  message(FATAL_ERROR
    "gridtrain needs the parallel (MPI) build of HDF5, but found a serial one "
    "(${HDF5_C_LIBRARIES}). On Debian/Ubuntu: apt-get install libhdf5-openmpi-dev; on a "
    "cluster: load the parallel HDF5 module or set HDF5_ROOT to a --enable-parallel install.")
endif()

find_package(Boost 1.71 REQUIRED COMPONENTS program_options)
find_package(OpenSSL REQUIRED COMPONENTS Crypto)  # SHA-256 of prepared corpora
find_package(Threads REQUIRED)
