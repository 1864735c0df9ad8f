# LibTorch for the areas that need it (train, comm, compress kernels, perf probes).
#
# torch/torch.h takes ~14 s to compile on two cores, so every LibTorch target
# reuses one precompiled header: call acc_use_torch(<target>) instead of linking
# torch directly. Keep LibTorch out of targets that do not need it.

# TorchConfig.cmake finds its own libraries with find_library(... PATHS <its>/lib),
# which searches the system's directories first: with Debian's LibTorch installed
# too, a pip build would take c10 and torch from Debian's. Its lib directory goes
# first, and the libraries found are checked to be its own.
find_file(ACC_TORCH_CONFIG Torch/TorchConfig.cmake PATHS ${Torch_DIR}/.. ${CMAKE_PREFIX_PATH} NO_DEFAULT_PATH)
if(ACC_TORCH_CONFIG)
  get_filename_component(acc_torch_root "${ACC_TORCH_CONFIG}/../../../.." ABSOLUTE)
  list(PREPEND CMAKE_LIBRARY_PATH "${acc_torch_root}/lib")
  # A build directory configured before keeps what it found then: found again.
  foreach(acc_torch_library IN ITEMS TORCH_LIBRARY c10_LIBRARY)
    string(FIND "${${acc_torch_library}}" "${acc_torch_root}/" acc_torch_at)
    if(DEFINED CACHE{${acc_torch_library}} AND NOT acc_torch_at EQUAL 0)
      unset(${acc_torch_library} CACHE)
    endif()
  endforeach()
endif()
find_package(Torch REQUIRED)
message(STATUS "LibTorch ${Torch_VERSION}")
get_filename_component(acc_torch_prefix "${TORCH_INSTALL_PREFIX}" REALPATH)
foreach(acc_torch_library IN ITEMS TORCH_LIBRARY c10_LIBRARY)
  get_filename_component(acc_torch_found "${${acc_torch_library}}" REALPATH)
  string(FIND "${acc_torch_found}" "${acc_torch_prefix}/" acc_torch_at)
  if(NOT acc_torch_at EQUAL 0)
    message(FATAL_ERROR "${acc_torch_library}=${${acc_torch_library}} is not a library of the LibTorch at "
                        "${TORCH_INSTALL_PREFIX}: configure a new build directory, or pass "
                        "-D${acc_torch_library}=<that LibTorch's library>")
  endif()
endforeach()

# c10d's Gloo and NCCL process-group headers are guarded by these definitions,
# which TorchConfig.cmake does not set.
set(ACC_TORCH_DEFINITIONS)
set(ACC_HAVE_CUDA OFF)
if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES)
  set(ACC_HAVE_CUDA ON)
  list(APPEND ACC_TORCH_DEFINITIONS USE_C10D_NCCL ACC_HAVE_CUDA=1)
  message(STATUS "CUDA LibTorch: NCCL backend and --device cuda enabled")
  include(${CMAKE_CURRENT_LIST_DIR}/AccNccl.cmake)
endif()

# Gloo's own headers (gloo/algorithm.h, ...) come with Debian's LibTorch but not
# with pip's wheels, and c10d's ProcessGroupGloo.hpp needs them. Without them the
# toolkit builds without the Gloo backend: the programs then refuse it with a
# usage error, and NCCL (CUDA builds) still works.
include(CheckCXXSourceCompiles)
set(CMAKE_REQUIRED_INCLUDES ${TORCH_INCLUDE_DIRS})
set(CMAKE_REQUIRED_DEFINITIONS -DUSE_C10D_GLOO)
set(CMAKE_REQUIRED_QUIET ON)
set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)  # compile only: the headers are the question
check_cxx_source_compiles([[
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
int options_size() { return static_cast<int>(sizeof(c10d::ProcessGroupGloo::Options)); }
]] ACC_HAVE_GLOO)
unset(CMAKE_REQUIRED_INCLUDES)
unset(CMAKE_REQUIRED_DEFINITIONS)
unset(CMAKE_REQUIRED_QUIET)
unset(CMAKE_TRY_COMPILE_TARGET_TYPE)
# LibTorch's own targets may define USE_C10D_GLOO (Debian's do) whether or not
# Gloo's headers are installed, so the code tests ACC_WITHOUT_GLOO instead.
if(ACC_HAVE_GLOO)
  list(APPEND ACC_TORCH_DEFINITIONS USE_C10D_GLOO)
  message(STATUS "Gloo backend enabled (c10d's ProcessGroupGloo.hpp and Gloo's headers found)")
else()
  list(APPEND ACC_TORCH_DEFINITIONS ACC_WITHOUT_GLOO=1)
  message(STATUS "Gloo backend disabled: this LibTorch has no Gloo headers (gloo/algorithm.h); "
                 "--device cpu runs of more than one rank are refused, NCCL is unaffected")
endif()

add_library(acc_torch_pch STATIC ${PROJECT_SOURCE_DIR}/cmake/torch_pch.cpp)
# fmt and spdlog before LibTorch: pip's LibTorch bundles its own fmt (a newer
# major version) under its include directory, and spdlog must see the fmt it was
# built against. The order of the link items sets the order of -isystem.
# -lstdc++ before LibTorch too: see the note on libstdc++ below.
target_link_libraries(acc_torch_pch PUBLIC fmt::fmt spdlog::spdlog -lstdc++ ${TORCH_LIBRARIES})
target_compile_definitions(acc_torch_pch PUBLIC ${ACC_TORCH_DEFINITIONS})
if(ACC_HAVE_CUDA)
  target_include_directories(acc_torch_pch SYSTEM PUBLIC ${ACC_NCCL_INCLUDE_DIR})
endif()
# The link order above cannot help when fmt lives in a directory the compiler
# searches by default (Debian's /usr/include): GCC drops -isystem /usr/include
# and searches it after every -isystem, LibTorch's bundled fmt included. A
# directory holding only a link to that fmt, put first, restores the order.
get_target_property(acc_fmt_includes fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
foreach(acc_torch_include IN LISTS TORCH_INCLUDE_DIRS)
  if(EXISTS "${acc_torch_include}/fmt/format.h")
    foreach(acc_fmt_include IN LISTS acc_fmt_includes)
      if(EXISTS "${acc_fmt_include}/fmt/format.h" AND NOT acc_fmt_include STREQUAL acc_torch_include
         AND NOT ACC_FMT_FIRST)
        set(ACC_FMT_FIRST "${CMAKE_BINARY_DIR}/fmt-before-torch")
        file(MAKE_DIRECTORY "${ACC_FMT_FIRST}")
        file(CREATE_LINK "${acc_fmt_include}/fmt" "${ACC_FMT_FIRST}/fmt" SYMBOLIC)
        target_include_directories(acc_torch_pch SYSTEM BEFORE PUBLIC "${ACC_FMT_FIRST}")
        message(STATUS "fmt ${fmt_VERSION} (${acc_fmt_include}) before LibTorch's bundled fmt")
      endif()
    endforeach()
  endif()
endforeach()
target_precompile_headers(acc_torch_pch PRIVATE <torch/torch.h>)
# libstdc++ first among every LibTorch program's DT_NEEDED entries. pip's
# libtorch_cpu.so carries its own copy of std::filesystem (linked statically
# from the manylinux toolchain's libstdc++_nonshared.a and exported), and the
# dynamic linker binds each symbol to the first library in load order that
# defines it: with libtorch listed before libstdc++, our calls went to that
# older copy and std::filesystem::remove_all crashed. --no-as-needed keeps the
# early entry even though nothing before it refers to libstdc++ yet. A compiler
# that links libstdc++ statically (no libstdc++.so to put first) needs the
# archive searched after our libraries and before LibTorch, so that our
# references are resolved in it rather than bound to LibTorch's copy: hence the
# -lstdc++ link item before ${TORCH_LIBRARIES} above (a no-op for a shared one).
target_link_options(acc_torch_pch INTERFACE "LINKER:--push-state,--no-as-needed,-lstdc++,--pop-state")

function(acc_use_torch target)
  target_link_libraries(${target} PUBLIC acc_torch_pch)
  target_precompile_headers(${target} REUSE_FROM acc_torch_pch)
endfunction()
