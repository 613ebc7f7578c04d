# cmake -DWORK_DIR=<folder> -P check_nccl_version.cmake
# Configure's NCCL check (cmake/NormlabNccl.cmake) on fake headers: a nccl.h of the same
# version as the library torch loads passes; one of another version stops configure with the
# mismatch message naming both versions. (Run with -DHEADER_VERSION and -DLIB_VERSION, the
# script is one case, which the driver below runs in a child CMake.)
include(${CMAKE_CURRENT_LIST_DIR}/../cmake/NormlabNccl.cmake)
if(DEFINED HEADER_VERSION)
  string(REPLACE "." ";" _parts "${HEADER_VERSION}")
  list(GET _parts 0 major)
  list(GET _parts 1 minor)
  list(GET _parts 2 patch)
  file(WRITE "${WORK_DIR}/nccl.h" "#define NCCL_MAJOR ${major}\n#define NCCL_MINOR ${minor}\n#define NCCL_PATCH ${patch}\n")
  normlab_nccl_header_version("${WORK_DIR}" seen)
  if(NOT seen STREQUAL HEADER_VERSION)
    message(FATAL_ERROR "header version read as '${seen}', written ${HEADER_VERSION}")
  endif()
  normlab_nccl_check("${WORK_DIR}" "${LIB_VERSION}" "a test library")
  return()
endif()

function(run_case header lib out_rc out_text)
  file(MAKE_DIRECTORY "${WORK_DIR}/${header}")
  execute_process(COMMAND ${CMAKE_COMMAND} -DWORK_DIR=${WORK_DIR}/${header} -DHEADER_VERSION=${header}
                          -DLIB_VERSION=${lib} -P ${CMAKE_CURRENT_LIST_FILE}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE o ERROR_VARIABLE e)
  string(REGEX REPLACE "[ \n]+" " " text "${o}${e}")  # CMake wraps long messages
  set(${out_rc} ${rc} PARENT_SCOPE)
  set(${out_text} "${text}" PARENT_SCOPE)
endfunction()

run_case(2.28.9 2.28.9 rc text)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "equal versions were rejected: ${text}")
endif()
run_case(2.18.1 2.28.9 rc text)
if(rc EQUAL 0 OR NOT text MATCHES "NCCL version mismatch: .*nccl.h is NCCL 2.18.1, but torch loads NCCL 2.28.9")
  message(FATAL_ERROR "a 2.18.1 header against a 2.28.9 library was not stopped as expected (exit ${rc}): ${text}")
endif()
message(STATUS "nccl version check: PASS")
