# Third-party libraries from Debian packages (tools/setup.sh installs them). See
# docs/dependencies.md for why each one sits where it does.
find_package(yaml-cpp CONFIG REQUIRED)       # 0.7: target `yaml-cpp`, no namespace
find_package(spdlog CONFIG REQUIRED)         # compiled against Debian's fmt 9: never sees torch
find_package(nlohmann_json 3 CONFIG REQUIRED)
find_package(ZLIB REQUIRED)
# SentencePiece ships no CMake config; found by file so that no pkg-config is needed either
# (tools/gpu/pack_deps.sh prefixes have none on the GPU machines).
find_path(NORMLAB_SPM_INCLUDE_DIR sentencepiece_processor.h)
find_library(NORMLAB_SPM_LIBRARY sentencepiece)
find_library(NORMLAB_SPM_TRAIN_LIBRARY sentencepiece_train)
if(NOT NORMLAB_SPM_INCLUDE_DIR OR NOT NORMLAB_SPM_LIBRARY OR NOT NORMLAB_SPM_TRAIN_LIBRARY)
  message(FATAL_ERROR "normlab: SentencePiece not found (headers: ${NORMLAB_SPM_INCLUDE_DIR}, "
    "library: ${NORMLAB_SPM_LIBRARY}). Install libsentencepiece-dev (tools/setup.sh) or add its "
    "prefix to CMAKE_PREFIX_PATH.")
endif()
add_library(normlab_sentencepiece INTERFACE IMPORTED)
set_target_properties(normlab_sentencepiece PROPERTIES
  INTERFACE_INCLUDE_DIRECTORIES "${NORMLAB_SPM_INCLUDE_DIR}"
  INTERFACE_LINK_LIBRARIES "${NORMLAB_SPM_TRAIN_LIBRARY};${NORMLAB_SPM_LIBRARY}")
# Hugging Face tokenizer.json files (src/data/hf_*): PCRE2 for the pre-tokenizer regexes (Unicode
# properties), utf8proc for Unicode normalization. Found by file, as SentencePiece.
find_path(NORMLAB_PCRE2_INCLUDE_DIR pcre2.h)
find_library(NORMLAB_PCRE2_LIBRARY pcre2-8)
find_path(NORMLAB_UTF8PROC_INCLUDE_DIR utf8proc.h)
find_library(NORMLAB_UTF8PROC_LIBRARY utf8proc)
if(NOT NORMLAB_PCRE2_INCLUDE_DIR OR NOT NORMLAB_PCRE2_LIBRARY OR NOT NORMLAB_UTF8PROC_INCLUDE_DIR
   OR NOT NORMLAB_UTF8PROC_LIBRARY)
  message(FATAL_ERROR "normlab: PCRE2 or utf8proc not found (pcre2.h: ${NORMLAB_PCRE2_INCLUDE_DIR}, "
    "libpcre2-8: ${NORMLAB_PCRE2_LIBRARY}, utf8proc.h: ${NORMLAB_UTF8PROC_INCLUDE_DIR}, "
    "libutf8proc: ${NORMLAB_UTF8PROC_LIBRARY}). Install libpcre2-dev and libutf8proc-dev "
    "(tools/setup.sh) or add their prefix to CMAKE_PREFIX_PATH.")
endif()
add_library(normlab_hf_text INTERFACE IMPORTED)
set_target_properties(normlab_hf_text PROPERTIES
  INTERFACE_INCLUDE_DIRECTORIES "${NORMLAB_PCRE2_INCLUDE_DIR};${NORMLAB_UTF8PROC_INCLUDE_DIR}"
  INTERFACE_LINK_LIBRARIES "${NORMLAB_PCRE2_LIBRARY};${NORMLAB_UTF8PROC_LIBRARY}")
if(NORMLAB_BUILD_TOOLS)
  find_package(CLI11 CONFIG REQUIRED)
endif()
if(NORMLAB_BUILD_TESTS)
  find_package(GTest CONFIG REQUIRED)
  include(GoogleTest)
endif()
# Open MPI: the CPU engine of multi-process training (communicator.h). Optional: without it a
# build trains in one process and refuses mpirun launches with a clear message.
find_package(MPI COMPONENTS C QUIET)
if(MPI_C_FOUND)
  set(NORMLAB_WITH_MPI ON)
  find_program(NORMLAB_MPIEXEC NAMES mpirun mpiexec)
else()
  set(NORMLAB_WITH_MPI OFF)
  message(STATUS "normlab: no MPI found: multi-process CPU training disabled (apt install libopenmpi-dev)")
endif()
