# NCCL's header for c10d's ProcessGroupNCCL.hpp, and a check that it is the
# NCCL LibTorch runs with.
#
# ProcessGroupNCCL.hpp includes <nccl.h>. pip's torch/include has none: the
# header is in the nvidia-nccl wheel installed beside torch (site-packages/
# nvidia/nccl), whose libnccl.so.2 is also the one libtorch_cuda.so loads (its
# run path points there). ProcessGroupNCCL::Options embeds ncclConfig_t, whose
# layout changes between NCCL releases, so a header of another release (the
# CUDA toolkit's, say) would compile and then corrupt memory: configure stops
# unless the header's version is the library's.
#
# Sets ACC_NCCL_INCLUDE_DIR (cache) and ACC_NCCL_VERSION ("2.28.9").

get_filename_component(acc_nccl_wheel "${TORCH_INSTALL_PREFIX}/../nvidia/nccl" ABSOLUTE)
find_path(ACC_NCCL_INCLUDE_DIR nccl.h
  HINTS "${acc_nccl_wheel}/include" ENV NCCL_ROOT ENV NCCL_HOME
  PATH_SUFFIXES include
  PATHS /usr/local/cuda/include
  DOC "Directory of the nccl.h that matches LibTorch's NCCL")
if(NOT ACC_NCCL_INCLUDE_DIR)
  message(FATAL_ERROR "nccl.h not found: c10d's NCCL backend needs the header of the NCCL that LibTorch "
                      "uses. For pip's torch it comes with the nvidia-nccl wheel (pip install torch installs it); "
                      "otherwise set -DACC_NCCL_INCLUDE_DIR=DIR")
endif()

# Where libtorch_cuda.so finds libnccl.so.2: pip's wheel first, then the system.
find_library(ACC_NCCL_LIBRARY NAMES libnccl.so.2 nccl
  HINTS "${acc_nccl_wheel}/lib" ENV NCCL_ROOT ENV NCCL_HOME
  PATH_SUFFIXES lib lib64
  DOC "The libnccl that LibTorch loads")

file(STRINGS "${ACC_NCCL_INCLUDE_DIR}/nccl.h" acc_nccl_defines REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) +[0-9]+")
set(acc_nccl_header_version "")
foreach(part MAJOR MINOR PATCH)
  string(REGEX MATCH "NCCL_${part} +([0-9]+)" _ "${acc_nccl_defines}")
  list(APPEND acc_nccl_header_version "${CMAKE_MATCH_1}")
endforeach()
string(JOIN "." acc_nccl_header_version ${acc_nccl_header_version})

set(acc_nccl_library_version "")
if(ACC_NCCL_LIBRARY)
  # ncclGetVersion needs no GPU: it reports the library's own version code.
  set(acc_probe "${CMAKE_BINARY_DIR}/CMakeFiles/acc_nccl_version.cpp")
  file(WRITE "${acc_probe}" [[
#include <cstdio>
extern "C" int ncclGetVersion(int* version);
int main() {
    int v = 0;
    if (ncclGetVersion(&v) != 0) return 1;
    // Codes from 2.9 on are MAJOR*10000 + MINOR*100 + PATCH.
    std::printf("%d.%d.%d", v / 10000, (v % 10000) / 100, v % 100);
    return 0;
}
]])
  try_run(acc_nccl_run acc_nccl_compiled "${CMAKE_BINARY_DIR}/CMakeFiles/acc_nccl_version" "${acc_probe}"
          LINK_LIBRARIES "${ACC_NCCL_LIBRARY}"
          RUN_OUTPUT_VARIABLE acc_nccl_library_version)
  if(NOT acc_nccl_compiled OR NOT acc_nccl_run EQUAL 0)
    set(acc_nccl_library_version "")
  endif()
endif()

if(NOT acc_nccl_library_version)
  message(WARNING "NCCL ${acc_nccl_header_version} header at ${ACC_NCCL_INCLUDE_DIR}; the library LibTorch "
                  "loads could not be found or run, so its version is unchecked (set -DACC_NCCL_LIBRARY=FILE)")
elseif(NOT acc_nccl_library_version STREQUAL acc_nccl_header_version)
  message(FATAL_ERROR "NCCL mismatch: ${ACC_NCCL_INCLUDE_DIR}/nccl.h is NCCL ${acc_nccl_header_version} but "
                      "${ACC_NCCL_LIBRARY} is ${acc_nccl_library_version}. ProcessGroupNCCL's options embed "
                      "NCCL's config struct, so both must be one release: point -DACC_NCCL_INCLUDE_DIR at the "
                      "header of ${acc_nccl_library_version} (pip's nvidia-nccl wheel has it)")
endif()
set(ACC_NCCL_VERSION "${acc_nccl_header_version}")
message(STATUS "NCCL ${ACC_NCCL_VERSION}: header ${ACC_NCCL_INCLUDE_DIR}, library ${ACC_NCCL_LIBRARY}")
