# Fails when cmake/NormlabSources.cmake and the .cpp and .cu files under src/ disagree, so that no
# source is forgotten (or listed after it was deleted). Run by CTest as `source_list`.
include(${LIST_FILE})
file(GLOB_RECURSE on_disk RELATIVE ${SRC_DIR} ${SRC_DIR}/*.cpp ${SRC_DIR}/*.cu)
list(REMOVE_ITEM on_disk util/log.cpp)   # the spdlog target's source, outside the library list
list(SORT on_disk)
set(listed ${NORMLAB_SOURCES} ${NORMLAB_KERNEL_SOURCES} ${NORMLAB_CUDA_KERNEL_SOURCES})
list(SORT listed)
if(NOT on_disk STREQUAL listed)
  set(missing ${on_disk})
  list(REMOVE_ITEM missing ${listed})
  set(stale ${listed})
  list(REMOVE_ITEM stale ${on_disk})
  message(FATAL_ERROR "cmake/NormlabSources.cmake is out of date.\n"
                      "  on disk but not listed: ${missing}\n  listed but not on disk: ${stale}")
endif()
