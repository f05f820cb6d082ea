# The CUDA backend: CUDA language, cuBLAS(Lt), NCCL, cuDNN and the header-only cuDNN frontend.
# TRAINER_CUDA=AUTO enables it when nvcc is found; the result is TRAINER_WITH_CUDA.
string(TOUPPER "${TRAINER_CUDA}" trainer_cuda)
if(NOT trainer_cuda MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "TRAINER_CUDA=${TRAINER_CUDA}: give AUTO (when nvcc is found), ON or OFF")
endif()
set(TRAINER_WITH_CUDA OFF)
set(TRAINER_WITH_CUDNN_FRONTEND OFF)
set(TRAINER_WITH_SM90_KERNELS OFF)

# Each path given on the command line must exist: a wrong one would only fail in the build.
function(trainer_check_given_path variable)
  if(${variable} AND NOT EXISTS "${${variable}}")
    message(FATAL_ERROR "${variable}=${${variable}} does not exist: fix the path or leave it out")
  endif()
endfunction()

if(NOT trainer_cuda STREQUAL "OFF")
  include(CheckLanguage)
  # nvcc as the user names it (CMAKE_CUDA_COMPILER, CUDACXX, CUDAToolkit_ROOT, PATH), else where
  # CUDA installs itself. A "not found" cached by an earlier configure is looked for again.
  if(DEFINED CACHE{CMAKE_CUDA_COMPILER} AND NOT CMAKE_CUDA_COMPILER)
    unset(CMAKE_CUDA_COMPILER CACHE)
  endif()
  if(CUDAToolkit_ROOT AND NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
    if(NOT EXISTS "${CUDAToolkit_ROOT}/bin/nvcc")
      message(FATAL_ERROR "CUDAToolkit_ROOT=${CUDAToolkit_ROOT} holds no bin/nvcc: fix the path")
    endif()
    set(CMAKE_CUDA_COMPILER "${CUDAToolkit_ROOT}/bin/nvcc")
  endif()
  check_language(CUDA)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    foreach(variable NCCL_INCLUDE_DIR NCCL_LIBRARY CUDNN_INCLUDE_DIR CUDNN_LIBRARY)
      trainer_check_given_path(${variable})
    endforeach()
    # CMake 4 names the toolkit's targets/<arch>/lib; NCCL and cuDNN may sit in its lib/ or lib64/.
    set(cuda_lib_hints ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib
                       ${CUDAToolkit_LIBRARY_ROOT}/lib64)
    set(cuda_include_hints ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}/include)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${cuda_include_hints})
    find_library(NCCL_LIBRARY nccl HINTS ${cuda_lib_hints})
    find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${cuda_include_hints})
    find_library(CUDNN_LIBRARY cudnn HINTS ${cuda_lib_hints})
    if(NOT NCCL_LIBRARY OR NOT NCCL_INCLUDE_DIR)
      message(FATAL_ERROR "CUDA found but NCCL is missing: install it (Debian/Ubuntu with NVIDIA's "
                          "repository: libnccl-dev), or set NCCL_INCLUDE_DIR and NCCL_LIBRARY, "
                          "or configure with -DTRAINER_CUDA=OFF")
    endif()
    set(TRAINER_WITH_CUDA ON)
    if(CUDNN_FRONTEND_INCLUDE_DIR)  # given: it must hold the headers
      if(NOT EXISTS ${CUDNN_FRONTEND_INCLUDE_DIR}/cudnn_frontend.h)
        message(FATAL_ERROR "CUDNN_FRONTEND_INCLUDE_DIR=${CUDNN_FRONTEND_INCLUDE_DIR} holds no "
                            "cudnn_frontend.h: point it at the include/ folder of PyPI's "
                            "nvidia-cudnn-frontend (scripts/fetch_cudnn_frontend.sh)")
      endif()
    else()
      set(CUDNN_FRONTEND_INCLUDE_DIR ${PROJECT_SOURCE_DIR}/.deps/cudnn-frontend/include)
    endif()
    if(CUDNN_LIBRARY AND CUDNN_INCLUDE_DIR AND EXISTS ${CUDNN_FRONTEND_INCLUDE_DIR}/cudnn_frontend.h)
      set(TRAINER_WITH_CUDNN_FRONTEND ON)
    endif()
    # Hopper kernels of our own (src/model/cuda/sm90/) where the architectures include sm_90.
    foreach(arch IN LISTS CMAKE_CUDA_ARCHITECTURES CMAKE_CUDA_ARCHITECTURES_NATIVE)
      if(arch MATCHES "^90" OR arch MATCHES "^all")
        set(TRAINER_WITH_SM90_KERNELS ON)
      endif()
    endforeach()
    message(STATUS "trainer: CUDA backend ON (${CMAKE_CUDA_COMPILER}, arch "
                   "${CMAKE_CUDA_ARCHITECTURES}), cuDNN frontend ${TRAINER_WITH_CUDNN_FRONTEND}, "
                   "Hopper kernels ${TRAINER_WITH_SM90_KERNELS}")
  elseif(trainer_cuda STREQUAL "ON")
    message(FATAL_ERROR "TRAINER_CUDA=ON but no CUDA compiler was found: put nvcc on PATH or set "
                        "CMAKE_CUDA_COMPILER (or CUDAToolkit_ROOT)")
  endif()
endif()
if(NOT TRAINER_WITH_CUDA)
  message(STATUS "trainer: CUDA backend OFF (CPU fp32 path only)")
endif()
