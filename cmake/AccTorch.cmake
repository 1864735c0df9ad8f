# LibTorch for the areas that need it (train, comm, compress kernels, perf probes).
#
# torch/torch.h takes ~14 s to compile on two cores, so every LibTorch target
# reuses one precompiled header: call acc_use_torch(<target>) instead of linking
# torch directly. Keep LibTorch out of targets that do not need it.

find_package(Torch REQUIRED)
message(STATUS "LibTorch ${Torch_VERSION}")

# c10d's Gloo and NCCL process-group headers are guarded by these definitions,
# which TorchConfig.cmake does not set.
set(ACC_TORCH_DEFINITIONS USE_C10D_GLOO)
set(ACC_HAVE_CUDA OFF)
if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES)
  set(ACC_HAVE_CUDA ON)
  list(APPEND ACC_TORCH_DEFINITIONS USE_C10D_NCCL ACC_HAVE_CUDA=1)
  message(STATUS "CUDA LibTorch: NCCL backend and --device cuda enabled")
endif()

add_library(acc_torch_pch STATIC ${PROJECT_SOURCE_DIR}/cmake/torch_pch.cpp)
target_link_libraries(acc_torch_pch PUBLIC ${TORCH_LIBRARIES})
target_compile_definitions(acc_torch_pch PUBLIC ${ACC_TORCH_DEFINITIONS})
target_precompile_headers(acc_torch_pch PRIVATE <torch/torch.h>)

function(acc_use_torch target)
  target_link_libraries(${target} PUBLIC acc_torch_pch)
  target_precompile_headers(${target} REUSE_FROM acc_torch_pch)
endfunction()
