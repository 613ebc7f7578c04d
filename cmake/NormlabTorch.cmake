# Finds LibTorch inside a Python torch installation (by default the project's .venv) and checks
# the CUDA toolkit that the torch wheel's CMake config needs at configure time.
#
# Inputs (cache):  NORMLAB_PYTHON  the python whose torch to use (default: .venv/bin/python,
#                                  else python3 on PATH). Ignored when Torch_DIR is set.
# Result:          the imported target `torch`, TORCH_LIBRARIES, NORMLAB_TORCH_PREFIX.

if(NOT Torch_DIR)
  set(_venv_python "${PROJECT_SOURCE_DIR}/.venv/bin/python")
  if(EXISTS "${_venv_python}")
    set(_default_python "${_venv_python}")
  else()
    find_program(_default_python NAMES python3 python)
  endif()
  set(NORMLAB_PYTHON "${_default_python}" CACHE FILEPATH "Python whose torch package provides LibTorch")
  if(NOT NORMLAB_PYTHON)
    message(FATAL_ERROR "normlab: no Python found to locate LibTorch. Run tools/setup.sh, or pass "
                        "-DNORMLAB_PYTHON=/path/to/python (with torch installed) or -DTorch_DIR=...")
  endif()
  # find_spec locates the package without importing it (no CUDA initialisation, fast).
  execute_process(
    COMMAND "${NORMLAB_PYTHON}" -c
      "import importlib.util,os;s=importlib.util.find_spec('torch');print(os.path.dirname(s.origin) if s else '')"
    OUTPUT_VARIABLE _torch_pkg OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0 OR NOT _torch_pkg)
    message(FATAL_ERROR "normlab: '${NORMLAB_PYTHON}' has no torch package. Run tools/setup.sh "
                        "(installs torch==2.11.0 into .venv) or point -DNORMLAB_PYTHON at a python with torch.")
  endif()
  set(Torch_DIR "${_torch_pkg}/share/cmake/Torch" CACHE PATH "LibTorch CMake package" FORCE)
endif()
get_filename_component(NORMLAB_TORCH_PREFIX "${Torch_DIR}/../../.." ABSOLUTE)
# torch's config finds Caffe2 on the default search path before its own folder, where a distro
# libtorch (Debian's libtorch-dev) would win: pin it beside Torch_DIR.
if(NOT Caffe2_DIR)
  get_filename_component(_caffe2_dir "${Torch_DIR}/../Caffe2" ABSOLUTE)
  set(Caffe2_DIR "${_caffe2_dir}" CACHE PATH "LibTorch's Caffe2 CMake package (beside Torch_DIR)")
endif()

# The torch wheel is a CUDA build: its config calls enable_language(CUDA) and
# find_package(CUDAToolkit REQUIRED) even for CPU-only use. Fail early and clearly.
if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc CACHE FILEPATH "CUDA compiler")
endif()
include(CheckLanguage)
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  message(FATAL_ERROR
    "normlab: the CUDA toolkit was not found, and torch's CMake package (${Torch_DIR}) needs it "
    "at configure time even for a CPU-only build. Install the CUDA 13.0 toolkit (nvcc, cudart, "
    "cuBLAS headers) under /usr/local/cuda or pass -DCMAKE_CUDA_COMPILER=/path/to/nvcc. "
    "See docs/dependencies.md.")
endif()
enable_language(CUDA)
# torch's config ignores (and turns OFF) CMAKE_CUDA_ARCHITECTURES and reads TORCH_CUDA_ARCH_LIST
# for its own nvcc flags; our kernels set their architectures per target (NORMLAB_CUDA_ARCHS).
if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(TORCH_CUDA_ARCH_LIST "9.0")
endif()

find_package(Torch REQUIRED)
message(STATUS "normlab: LibTorch ${Torch_VERSION} from ${NORMLAB_TORCH_PREFIX}")

# oneDNN's matmul is exported by LibTorch (at::native::mkldnn_matmul) but has no installed
# header; src/kernels/cpu/onednn_linear.cpp declares it when this check compiles and links against the library
# files directly (the imported targets do not carry into a check project).
if(NOT DEFINED NORMLAB_HAVE_ONEDNN_MATMUL)
  include(CheckCXXSourceCompiles)
  file(READ ${CMAKE_CURRENT_LIST_DIR}/checks/onednn_matmul.cpp _onednn_check)
  set(CMAKE_REQUIRED_INCLUDES ${TORCH_INCLUDE_DIRS})
  set(CMAKE_REQUIRED_LIBRARIES ${NORMLAB_TORCH_PREFIX}/lib/libtorch_cpu.so ${NORMLAB_TORCH_PREFIX}/lib/libc10.so)
  set(CMAKE_REQUIRED_FLAGS "-std=c++17")
  set(CMAKE_REQUIRED_QUIET ON)
  check_cxx_source_compiles("${_onednn_check}" NORMLAB_HAVE_ONEDNN_MATMUL)
  unset(CMAKE_REQUIRED_INCLUDES)
  unset(CMAKE_REQUIRED_LIBRARIES)
  unset(CMAKE_REQUIRED_FLAGS)
  unset(CMAKE_REQUIRED_QUIET)
endif()
message(STATUS "normlab: oneDNN matmul from LibTorch: ${NORMLAB_HAVE_ONEDNN_MATMUL}")

# The Fortran BLAS GEMMs that LibTorch carries (MKL's sgemm_/dgemm_ in the x86-64 wheels, with
# the 32-bit integers ATen itself declares them with): the per-head products of
# kernels::causal_attention (src/kernels/cpu/blas.cpp). Checked the same way.
if(NOT DEFINED NORMLAB_HAVE_BLAS_GEMM)
  include(CheckCXXSourceCompiles)
  file(READ ${CMAKE_CURRENT_LIST_DIR}/checks/blas_gemm.cpp _blas_check)
  set(CMAKE_REQUIRED_LIBRARIES ${NORMLAB_TORCH_PREFIX}/lib/libtorch_cpu.so ${NORMLAB_TORCH_PREFIX}/lib/libc10.so)
  set(CMAKE_REQUIRED_QUIET ON)
  check_cxx_source_compiles("${_blas_check}" NORMLAB_HAVE_BLAS_GEMM)
  unset(CMAKE_REQUIRED_LIBRARIES)
  unset(CMAKE_REQUIRED_QUIET)
endif()
message(STATUS "normlab: BLAS GEMM (sgemm_, dgemm_) from LibTorch: ${NORMLAB_HAVE_BLAS_GEMM}")

# normlab's own CPU kernels (src/kernels/cpu/) split their rows with at::parallel_for. That
# template is inline: it reaches LibTorch's OpenMP threads only in a source compiled with
# OpenMP (ATen/ParallelOpenMP.h defines the parallel path under _OPENMP); anywhere else every
# loop runs on the calling thread. So the kernels' sources (the object library normlab_kernels,
# src/CMakeLists.txt) are compiled with OpenMP when LibTorch
# itself runs on OpenMP (ATen/Config.h: AT_PARALLEL_OPENMP 1), and links the same libgomp
# (one soname, so one thread pool in the process).
set(NORMLAB_KERNELS_OPENMP OFF)
find_file(NORMLAB_ATEN_CONFIG ATen/Config.h PATHS ${TORCH_INCLUDE_DIRS} NO_DEFAULT_PATH)
if(NORMLAB_ATEN_CONFIG)
  file(STRINGS ${NORMLAB_ATEN_CONFIG} _at_openmp REGEX "^#define AT_PARALLEL_OPENMP 1")
endif()
# LibTorch's own libgomp where its package carries one (the pip wheel does), so that the link
# names the library the process loads; else the compiler's.
find_library(NORMLAB_TORCH_GOMP NAMES libgomp.so.1 gomp PATHS ${NORMLAB_TORCH_PREFIX}/lib
             NO_DEFAULT_PATH)
set(_one_thread "normlab's CPU kernels (RMSNorm, RoPE, SwiGLU, attention, cross-entropy) will run on one thread")
if(NOT _at_openmp)
  # LibTorch without OpenMP: at::parallel_for is its own, and needs no flag.
elseif(NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  # Another compiler's OpenMP calls its own runtime (clang: libomp), not LibTorch's libgomp.
  message(WARNING "normlab: LibTorch runs on GNU OpenMP (libgomp) and ${CMAKE_CXX_COMPILER_ID} "
    "compiles for another runtime: ${_one_thread}")
elseif(NOT NORMLAB_TORCH_GOMP AND EXISTS ${NORMLAB_TORCH_PREFIX}/lib/libiomp5.so)
  message(WARNING "normlab: this LibTorch carries Intel's OpenMP (libiomp5), not libgomp: "
    "${_one_thread}")
else()
  find_package(OpenMP COMPONENTS CXX)
  if(OpenMP_CXX_FOUND)
    set(NORMLAB_KERNELS_OPENMP ON)
    if(NORMLAB_TORCH_GOMP)
      set(NORMLAB_GOMP_LIBRARY ${NORMLAB_TORCH_GOMP})
    else()
      set(NORMLAB_GOMP_LIBRARY ${OpenMP_CXX_LIBRARIES})
    endif()
  else()
    message(WARNING "normlab: LibTorch runs on OpenMP but this compiler offers none: ${_one_thread}")
  endif()
endif()
message(STATUS "normlab: CPU kernels on LibTorch's OpenMP threads: ${NORMLAB_KERNELS_OPENMP}")
