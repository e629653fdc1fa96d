# LibTorch (2.4 or later), the one every build uses, and whether the GPU path is built.
#
# Which LibTorch: Torch_DIR or CMAKE_PREFIX_PATH (variable or environment) when they name one (an
# unpacked libtorch zip, a cluster module); otherwise the C++ part of the PyPI torch wheel that
# scripts/install-deps installs, found through the Python that has it (/usr/bin/python3 first).
# LibTorch < 2.4 is refused: gridtrain relies on its fused attention, multi-tensor and fused
# AdamW (_fused_adamw_, 2.4) and device-generic autocast.
#
# The GPU path (NCCL backend, CUDA kernels, GPU tests) is GRIDTRAIN_CUDA: AUTO builds it where a
# CUDA compiler is found, so one binary serves CPU and GPU runs. Without it, a CUDA build of
# LibTorch (PyPI's wheel is one) is linked through its CPU libraries alone, imported here
# directly: TorchConfig.cmake would insist on a CUDA toolkit the CPU build does not need.
#
# Sets GRIDTRAIN_CUDA (ON/OFF), TORCH_LIBRARIES, TORCH_CXX_FLAGS, GRIDTRAIN_TORCH_ROOT (the
# directory holding include/ and lib/), GRIDTRAIN_TORCH_VERSION.

if(GRIDTRAIN_CUDA STREQUAL "AUTO" OR GRIDTRAIN_CUDA)
  find_program(GRIDTRAIN_NVCC nvcc HINTS ENV CUDA_HOME PATHS /usr/local/cuda PATH_SUFFIXES bin)
endif()
if(GRIDTRAIN_CUDA STREQUAL "AUTO")
  if(GRIDTRAIN_NVCC)
    set(GRIDTRAIN_CUDA ON)
  else()
    set(GRIDTRAIN_CUDA OFF)
  endif()
  message(STATUS "GPU path (GRIDTRAIN_CUDA=AUTO): ${GRIDTRAIN_CUDA} (nvcc: ${GRIDTRAIN_NVCC})")
endif()
if(GRIDTRAIN_CUDA AND NOT CMAKE_CUDA_COMPILER)
  if(NOT GRIDTRAIN_NVCC)
    message(FATAL_ERROR "GRIDTRAIN_CUDA=ON needs nvcc (CUDA toolkit in /usr/local/cuda or CUDA_HOME), "
                        "or CMAKE_CUDA_COMPILER; use GRIDTRAIN_CUDA=AUTO or OFF for a CPU-only build.")
  endif()
  set(CMAKE_CUDA_COMPILER "${GRIDTRAIN_NVCC}")
endif()

find_program(GRIDTRAIN_TORCH_PYTHON python3 PATHS /usr/bin NO_DEFAULT_PATH)
find_program(GRIDTRAIN_TORCH_PYTHON python3)
execute_process(
  COMMAND "${GRIDTRAIN_TORCH_PYTHON}" -c
          "import importlib.util as u; s = u.find_spec('torch'); print(s.submodule_search_locations[0] if s else '')"
  OUTPUT_VARIABLE pip_torch OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
find_path(GRIDTRAIN_TORCH_CONFIG_DIR TorchConfig.cmake
  HINTS ${Torch_DIR} ENV Torch_DIR
  PATHS ${CMAKE_PREFIX_PATH} ENV CMAKE_PREFIX_PATH "${pip_torch}/share/cmake"
  PATH_SUFFIXES Torch share/cmake/Torch NO_DEFAULT_PATH)
if(NOT GRIDTRAIN_TORCH_CONFIG_DIR)
  message(FATAL_ERROR "LibTorch (2.4 or later) not found: run scripts/install-deps (pip torch==2.11.0 into "
                      "${GRIDTRAIN_TORCH_PYTHON}'s site), or point CMAKE_PREFIX_PATH or Torch_DIR at a LibTorch.")
endif()
get_filename_component(GRIDTRAIN_TORCH_ROOT "${GRIDTRAIN_TORCH_CONFIG_DIR}/../../.." ABSOLUTE)

file(STRINGS "${GRIDTRAIN_TORCH_CONFIG_DIR}/TorchConfigVersion.cmake" version_line REGEX "set\\(PACKAGE_VERSION ")
string(REGEX MATCH "[0-9]+(\\.[0-9]+)*" GRIDTRAIN_TORCH_VERSION "${version_line}")
if(GRIDTRAIN_TORCH_VERSION VERSION_LESS 2.4)
  message(FATAL_ERROR "LibTorch '${GRIDTRAIN_TORCH_VERSION}' in ${GRIDTRAIN_TORCH_ROOT}: gridtrain needs 2.4 or later "
                      "(scripts/install-deps installs 2.11.0 from PyPI's torch wheel).")
endif()

if(NOT GRIDTRAIN_CUDA AND EXISTS "${GRIDTRAIN_TORCH_ROOT}/lib/libtorch_cuda.so")
  # libtorch.so of a CUDA build only ties libtorch_cpu to libtorch_cuda; libtorch_cpu holds every
  # CPU kernel. Its own RPATH finds the CUDA runtime it loads (the wheel's nvidia/ beside torch/).
  file(STRINGS "${GRIDTRAIN_TORCH_CONFIG_DIR}/TorchConfig.cmake" flags_line REGEX "set\\(TORCH_CXX_FLAGS ")
  string(REGEX REPLACE ".*\"(.*)\".*" "\\1" TORCH_CXX_FLAGS "${flags_line}")
  add_library(gridtrain_libtorch_cpu INTERFACE)
  target_include_directories(gridtrain_libtorch_cpu SYSTEM INTERFACE
    "${GRIDTRAIN_TORCH_ROOT}/include" "${GRIDTRAIN_TORCH_ROOT}/include/torch/csrc/api/include")
  target_link_libraries(gridtrain_libtorch_cpu INTERFACE
    "${GRIDTRAIN_TORCH_ROOT}/lib/libtorch_cpu.so" "${GRIDTRAIN_TORCH_ROOT}/lib/libc10.so")
  set(TORCH_LIBRARIES gridtrain_libtorch_cpu)
else()
  if(GRIDTRAIN_CUDA)
    # Before LibTorch's config, which compiles CUDA probes: CMake 3.25 knows nvcc only up to
    # C++17, and the .cu files need no more.
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    enable_language(CUDA)
    # LibTorch's config rejects CMAKE_CUDA_ARCHITECTURES (it uses TORCH_CUDA_ARCH_LIST); our own
    # kernels get theirs from GRIDTRAIN_CUDA_ARCHITECTURES (A100, H100/H200 by default).
    set(GRIDTRAIN_CUDA_ARCHITECTURES "80;90" CACHE STRING "CUDA architectures of gridtrain's kernels")
    if(NOT TORCH_CUDA_ARCH_LIST)
      set(TORCH_CUDA_ARCH_LIST "8.0;9.0")
    endif()
    unset(CMAKE_CUDA_ARCHITECTURES)
    unset(CMAKE_CUDA_ARCHITECTURES CACHE)
  endif()
  # Ahead of every other prefix: its config finds Caffe2's config and its libraries by searching,
  # and a Debian libtorch-dev in /usr must not answer.
  list(PREPEND CMAKE_PREFIX_PATH "${GRIDTRAIN_TORCH_ROOT}" "${GRIDTRAIN_TORCH_ROOT}/share/cmake")
  find_package(Torch REQUIRED CONFIG PATHS "${GRIDTRAIN_TORCH_CONFIG_DIR}" NO_DEFAULT_PATH)
endif()
message(STATUS "LibTorch ${GRIDTRAIN_TORCH_VERSION}: ${GRIDTRAIN_TORCH_ROOT}")
# Every target shares std::string/STL types with LibTorch code, so every target needs its ABI
# flags (-D_GLIBCXX_USE_CXX11_ABI).
add_compile_options(${TORCH_CXX_FLAGS})
