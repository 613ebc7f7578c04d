# The library's sources, listed explicitly for review; tests/check_source_list.cmake fails
# when this list and the files under src/ disagree. Paths are relative to src/.
set(NORMLAB_SOURCES
  device.cpp
)
