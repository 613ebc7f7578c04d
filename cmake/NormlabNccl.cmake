# Finds the nccl.h that matches the NCCL library LibTorch loads, for comm/nccl.cpp.
#
# ProcessGroupNCCL's headers change their option layout with the NCCL version, so compiling
# against one NCCL and running with another can corrupt memory. torch's pip wheels load NCCL
# from the nvidia-nccl package beside them (site-packages/nvidia/nccl/lib), which ships its
# header too: that include folder comes first; the CUDA toolkit's is only a fallback. Configure
# then compares the header's version with the version of the library torch loads and stops
# with a clear message when they differ.
#
# Inputs:  NORMLAB_TORCH_PREFIX (torch's package folder), NORMLAB_PYTHON (optional: asks torch
#          for the NCCL version it loads), NORMLAB_NCCL_INCLUDE_DIR (cache; set it to override).
# Result:  NORMLAB_NCCL_INCLUDE_DIR (empty when no nccl.h was found), NORMLAB_NCCL_VERSION.

# normlab_nccl_header_version(<dir> <out-var>): "major.minor.patch" from <dir>/nccl.h.
function(normlab_nccl_header_version dir out)
  file(STRINGS "${dir}/nccl.h" _defs REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) +[0-9]+")
  set(_v "")
  foreach(part MAJOR MINOR PATCH)
    string(REGEX MATCH "NCCL_${part} +([0-9]+)" _m "${_defs}")
    if(NOT _m)
      set(${out} "" PARENT_SCOPE)
      return()
    endif()
    list(APPEND _v ${CMAKE_MATCH_1})
  endforeach()
  string(REPLACE ";" "." _v "${_v}")
  set(${out} "${_v}" PARENT_SCOPE)
endfunction()

# normlab_nccl_check(<include-dir> <library-version> <library-source>): stops configure when
# the header in <include-dir> is of another NCCL version than the library torch loads.
function(normlab_nccl_check dir lib_version lib_source)
  normlab_nccl_header_version("${dir}" _hv)
  if(NOT _hv)
    message(FATAL_ERROR "normlab: ${dir}/nccl.h defines no NCCL_MAJOR/MINOR/PATCH; set "
                        "-DNORMLAB_NCCL_INCLUDE_DIR to the include folder of a real NCCL.")
  endif()
  if(NOT _hv VERSION_EQUAL lib_version)
    message(FATAL_ERROR
      "normlab: NCCL version mismatch: ${dir}/nccl.h is NCCL ${_hv}, but torch loads NCCL "
      "${lib_version} (${lib_source}). ProcessGroupNCCL's option layout depends on the version, so "
      "normlab must compile against the header of the library it runs with. Point "
      "-DNORMLAB_NCCL_INCLUDE_DIR at the include folder of NCCL ${lib_version} (torch's pip "
      "package nvidia-nccl-cu* ships it as site-packages/nvidia/nccl/include), or configure "
      "with -DNORMLAB_CUDA=OFF to build without the GPU engine.")
  endif()
endfunction()

if(NOT CMAKE_SCRIPT_MODE_FILE)
  get_filename_component(_torch_site "${NORMLAB_TORCH_PREFIX}/.." ABSOLUTE)
  # 1. torch's own NCCL, and nothing else in this first search.
  find_path(NORMLAB_NCCL_INCLUDE_DIR nccl.h PATHS "${_torch_site}/nvidia/nccl/include" NO_DEFAULT_PATH)
  # 2. the CUDA toolkit's (a LibTorch zip built against the toolkit's NCCL).
  find_path(NORMLAB_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)

  # The version of the NCCL library torch loads: torch itself says it (no GPU needed); without
  # a Python, the version of the nvidia-nccl package beside torch.
  if(NORMLAB_NCCL_INCLUDE_DIR AND NOT DEFINED NORMLAB_TORCH_NCCL_VERSION)
    set(_lib_version "")
    set(_lib_source "")
    if(NORMLAB_PYTHON)
      execute_process(
        COMMAND "${NORMLAB_PYTHON}" -c "import torch; print('.'.join(map(str, torch.cuda.nccl.version())))"
        OUTPUT_VARIABLE _out ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc)
      if(_rc EQUAL 0 AND _out MATCHES "^[0-9]+\\.[0-9]+\\.[0-9]+$")
        set(_lib_version "${_out}")
        set(_lib_source "torch.cuda.nccl.version() of ${NORMLAB_PYTHON}")
      endif()
    endif()
    if(NOT _lib_version)
      file(GLOB _dist "${_torch_site}/nvidia_nccl_cu*.dist-info")
      if(_dist)
        list(GET _dist 0 _dist)
        string(REGEX MATCH "-([0-9]+\\.[0-9]+\\.[0-9]+)" _m "${_dist}")
        set(_lib_version "${CMAKE_MATCH_1}")
        set(_lib_source "${_dist}")
      endif()
    endif()
    set(NORMLAB_TORCH_NCCL_VERSION "${_lib_version}" CACHE INTERNAL "NCCL version torch loads")
    set(NORMLAB_TORCH_NCCL_SOURCE "${_lib_source}" CACHE INTERNAL "where that version was read")
  endif()

  if(NORMLAB_NCCL_INCLUDE_DIR)
    normlab_nccl_header_version("${NORMLAB_NCCL_INCLUDE_DIR}" NORMLAB_NCCL_VERSION)
    if(NORMLAB_TORCH_NCCL_VERSION)
      normlab_nccl_check("${NORMLAB_NCCL_INCLUDE_DIR}" "${NORMLAB_TORCH_NCCL_VERSION}" "${NORMLAB_TORCH_NCCL_SOURCE}")
    else()
      message(WARNING "normlab: cannot tell which NCCL version torch loads (no Python with torch, no "
                      "nvidia-nccl package beside it); compiling against ${NORMLAB_NCCL_INCLUDE_DIR}/nccl.h "
                      "(NCCL ${NORMLAB_NCCL_VERSION}) unchecked.")
    endif()
    message(STATUS "normlab: nccl.h ${NORMLAB_NCCL_VERSION} from ${NORMLAB_NCCL_INCLUDE_DIR}")
  endif()
endif()
