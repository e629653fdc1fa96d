# Third-party packages. Each failure says which package provides what is missing.

if(GRIDTRAIN_CUDA)
  # Before LibTorch's config, which compiles CUDA probes: CMake 3.25 knows nvcc only up to
  # C++17, and the .cu files need no more.
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  enable_language(CUDA)
  # LibTorch's config rejects CMAKE_CUDA_ARCHITECTURES (it uses TORCH_CUDA_ARCH_LIST); our own
  # kernels get theirs from GRIDTRAIN_CUDA_ARCHITECTURES (A100, H100/H200 by default).
  set(GRIDTRAIN_CUDA_ARCHITECTURES "80;90" CACHE STRING "CUDA architectures of gridtrain's kernels")
  unset(CMAKE_CUDA_ARCHITECTURES)
  unset(CMAKE_CUDA_ARCHITECTURES CACHE)
endif()

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
find_package(ZLIB REQUIRED)  # gzipped IDX image sets (prepare idx)
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
# SentencePiece (Google's C++ library; Debian libsentencepiece-dev): prepare --tokenizer
# sentencepiece, its training, and decoding in `gridtrain generate`.
pkg_check_modules(SENTENCEPIECE REQUIRED IMPORTED_TARGET sentencepiece)

# The GPU path (cuda preset): nvcc for the compression kernels, NCCL for the device backend,
# from the CUDA toolkit (/usr/local/cuda); LibTorch must be a CUDA build of the same major
# version (scripts/fetch-libtorch-cuda).
if(GRIDTRAIN_CUDA)
  find_package(CUDAToolkit REQUIRED)
  # Libraries the CUDA LibTorch needs that the toolkit lacks or has too old (NCCL), and the
  # driver stub, from scripts/fetch-libtorch-cuda: for the linker, and NCCL for gridtrain too,
  # since one process can hold only one libnccl.so.2. The header is the toolkit's.
  set(GRIDTRAIN_CUDA_EXTRA_LIB "${TORCH_INSTALL_PREFIX}/../extra-lib")
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_HOME PATH_SUFFIXES include)
  if(NCCL_LIBRARY AND NOT EXISTS "${NCCL_LIBRARY}")  # e.g. from an earlier LibTorch's NCCL wheel
    unset(NCCL_LIBRARY CACHE)
  endif()
  find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR
               HINTS ${GRIDTRAIN_CUDA_EXTRA_LIB} ENV NCCL_HOME ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib lib64)
  if(NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY)
    message(FATAL_ERROR "GRIDTRAIN_CUDA needs NCCL (nccl.h, libnccl.so): install it with the CUDA "
                        "toolkit or set NCCL_HOME.")
  endif()
  if(NOT TARGET torch_cuda)
    message(FATAL_ERROR "GRIDTRAIN_CUDA needs a CUDA build of LibTorch, but ${TORCH_INSTALL_PREFIX} "
                        "is a CPU build: run scripts/fetch-libtorch-cuda and configure with --preset cuda.")
  endif()
  if(EXISTS "${GRIDTRAIN_CUDA_EXTRA_LIB}")
    add_link_options("LINKER:-rpath-link,${GRIDTRAIN_CUDA_EXTRA_LIB}:${GRIDTRAIN_CUDA_EXTRA_LIB}/driver-stub")
  endif()
  add_link_options("LINKER:-rpath-link,${CUDAToolkit_LIBRARY_DIR}")
endif()
