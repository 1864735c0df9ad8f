# Whether the toolkit's CUDA kernels can be built with an nvcc, for a LibTorch whose
# CUDA version is known (the Python package's build passes torch.version.cuda as
# ACC_TORCH_CUDA): the kernels call the CUDA runtime torch loads, so they need an nvcc
# of the same CUDA major version. Kept apart so that tests can run it with cmake -P.
#
#   acc_cuda_kernels_choice(NVCC TORCH_CUDA OUT_OK OUT_REASON)
# NVCC: the compiler's path (empty where none was found); TORCH_CUDA: "13.0", or empty
# where unknown (then any working nvcc will do). OUT_OK is set to ON or OFF, OUT_REASON
# to why they are left out.
function(acc_cuda_kernels_choice nvcc torch_cuda out_ok out_reason)
  set(${out_ok} OFF PARENT_SCOPE)
  if(NOT nvcc)
    set(${out_reason} "no working nvcc found (CUDA ${torch_cuda}'s toolkit, on PATH or as CUDACXX)" PARENT_SCOPE)
    return()
  endif()
  execute_process(COMMAND "${nvcc}" --version RESULT_VARIABLE status OUTPUT_VARIABLE text ERROR_QUIET)
  string(REGEX MATCH "release ([0-9]+)\\.([0-9]+)" release "${text}")
  if(NOT status EQUAL 0 OR NOT release)
    set(${out_reason} "no working nvcc found (${nvcc} does not run)" PARENT_SCOPE)
    return()
  endif()
  set(nvcc_major "${CMAKE_MATCH_1}")
  set(nvcc_version "${CMAKE_MATCH_1}.${CMAKE_MATCH_2}")
  string(REGEX MATCH "^[0-9]+" torch_major "${torch_cuda}")
  if(torch_cuda AND NOT torch_major STREQUAL nvcc_major)
    set(${out_reason} "nvcc ${nvcc_version} (${nvcc}) is not of torch's CUDA ${torch_cuda}: use that CUDA's nvcc (CUDACXX)"
        PARENT_SCOPE)
    return()
  endif()
  set(${out_ok} ON PARENT_SCOPE)
  set(${out_reason} "" PARENT_SCOPE)
endfunction()
