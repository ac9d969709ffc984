# Decides whether the NCCL (GPU) backend is built. Sets KOROVOD_HAVE_NCCL and, when ON, defines the
# imported targets korovod::cudart (CUDA runtime API) and korovod::nccl.
#
# KOROVOD_WITH_NCCL: AUTO builds the backend when CUDA and NCCL are found and is silent otherwise
# (a CPU-only build needs nothing from here); ON fails if they are missing; OFF skips the search.
#
# Searched in order, CUDA runtime and NCCL independently (a system toolkit with NCCL from a wheel
# is fine, NCCL links its own copy of the runtime statically):
#   KOROVOD_CUDA_ROOT, $CUDA_HOME, $CUDA_PATH, $NCCL_HOME, /usr/local/cuda, /usr,
#   ${PROJECT_SOURCE_DIR}/.deps/cuda (pip wheels from scripts/install-deps.sh --cuda).
# Each root may be a toolkit (include/, lib64/ or lib/) or a pip --target/site-packages directory
# (nvidia/cu13/{include,lib}, nvidia/cuda_runtime/..., nvidia/nccl/...). Wheels ship only versioned
# sonames (libcudart.so.13, libnccl.so.2), so the imported targets point at whichever file exists.
# Only the C++ compiler is used: no CUDA language, no nvcc.

set(KOROVOD_CUDA_ROOT "" CACHE PATH
    "CUDA toolkit or pip wheel prefix searched first for the CUDA runtime and NCCL")
set(KOROVOD_HAVE_NCCL OFF)
# NCCL 2.14: ncclCommInitRankConfig with non-blocking init (the init deadline needs it);
# ncclAvg, ncclRedOpCreatePreMulSum and bfloat16 are older.
set(_korovod_nccl_min_version 2.14)

if(NOT KOROVOD_WITH_NCCL MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "KOROVOD_WITH_NCCL must be AUTO, ON or OFF, not '${KOROVOD_WITH_NCCL}'")
endif()

# Sets ${out} to lib<name>.so in one of ${dirs}, else to the shortest versioned lib<name>.so.N*
# (the soname, e.g. libnccl.so.2 rather than libnccl.so.2.32.3), else to "".
function(_korovod_find_shared_lib out name)
  foreach(dir IN LISTS ARGN)
    if(EXISTS "${dir}/lib${name}.so")
      set(${out} "${dir}/lib${name}.so" PARENT_SCOPE)
      return()
    endif()
    file(GLOB versioned "${dir}/lib${name}.so.[0-9]*")
    set(best "")
    foreach(f IN LISTS versioned)
      string(LENGTH "${f}" len)
      string(LENGTH "${best}" best_len)
      if(best STREQUAL "" OR len LESS best_len)
        set(best "${f}")
      endif()
    endforeach()
    if(best)
      set(${out} "${best}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  set(${out} "" PARENT_SCOPE)
endfunction()

function(_korovod_toolkit_lib_dirs out root)
  set(dirs "${root}/lib64" "${root}/lib" "${root}/targets/${CMAKE_SYSTEM_PROCESSOR}-linux/lib")
  if(CMAKE_LIBRARY_ARCHITECTURE)
    list(APPEND dirs "${root}/lib/${CMAKE_LIBRARY_ARCHITECTURE}")
  endif()
  set(${out} ${dirs} PARENT_SCOPE)
endfunction()

# If ${incs} (a list; the first must hold ${header}) and lib${name}.so* in ${lib_dirs} exist, sets
# _korovod_<name>_include and _korovod_<name>_lib in the caller, unless an earlier call did.
function(_korovod_try header name incs lib_dirs)
  list(GET incs 0 inc0)
  if(_korovod_${name}_lib OR NOT EXISTS "${inc0}/${header}")
    return()
  endif()
  _korovod_find_shared_lib(lib ${name} ${lib_dirs})
  if(NOT lib)
    return()
  endif()
  set(found "")
  foreach(i IN LISTS incs)
    if(IS_DIRECTORY "${i}")
      list(APPEND found "${i}")
    endif()
  endforeach()
  set(_korovod_${name}_include "${found}" PARENT_SCOPE)
  set(_korovod_${name}_lib "${lib}" PARENT_SCOPE)
endfunction()

# Sets _korovod_{cudart,nccl}_{include,lib} from the first root that has each.
macro(_korovod_search_roots)
  set(_korovod_cudart_lib "")
  set(_korovod_nccl_lib "")
  foreach(root IN LISTS _korovod_roots)
    _korovod_toolkit_lib_dirs(_lib_dirs "${root}")
    # CUDA runtime: toolkit layout, then cu13+ wheels (everything under nvidia/cuNN, newest
    # first), then cu12 wheels (headers split over the runtime, nvcc (crt/) and cccl (nv/) ones).
    _korovod_try(cuda_runtime_api.h cudart "${root}/include" "${_lib_dirs}")
    file(GLOB _wheel_dirs "${root}/nvidia/cu[0-9]*")
    list(SORT _wheel_dirs COMPARE NATURAL ORDER DESCENDING)
    foreach(d IN LISTS _wheel_dirs)
      _korovod_try(cuda_runtime_api.h cudart "${d}/include" "${d}/lib")
    endforeach()
    set(_incs "${root}/nvidia/cuda_runtime/include" "${root}/nvidia/cuda_nvcc/include"
              "${root}/nvidia/cuda_cccl/include")
    _korovod_try(cuda_runtime_api.h cudart "${_incs}" "${root}/nvidia/cuda_runtime/lib")
    _korovod_try(nccl.h nccl "${root}/include" "${_lib_dirs}")
    _korovod_try(nccl.h nccl "${root}/nvidia/nccl/include" "${root}/nvidia/nccl/lib")
  endforeach()
endmacro()

# Reports why the backend is not built (the arguments, concatenated): fatal for ON, a status line
# for AUTO.
macro(_korovod_nccl_unavailable)
  string(CONCAT _korovod_why ${ARGV})
  if(KOROVOD_WITH_NCCL STREQUAL "ON")
    message(FATAL_ERROR "KOROVOD_WITH_NCCL=ON but ${_korovod_why}. Searched: ${_korovod_candidates}. "
                        "Run scripts/install-deps.sh --cuda or set KOROVOD_CUDA_ROOT.")
  endif()
  message(STATUS "korovod: NCCL backend OFF (${_korovod_why}; "
                 "scripts/install-deps.sh --cuda provides it)")
endmacro()

if(KOROVOD_WITH_NCCL STREQUAL "OFF")
  message(STATUS "korovod: NCCL backend OFF (KOROVOD_WITH_NCCL=OFF)")
  return()
endif()

set(_korovod_candidates "")  # every root considered, for the error message
set(_korovod_roots "")
foreach(r IN ITEMS "${KOROVOD_CUDA_ROOT}" "$ENV{CUDA_HOME}" "$ENV{CUDA_PATH}" "$ENV{NCCL_HOME}"
                   /usr/local/cuda /usr "${PROJECT_SOURCE_DIR}/.deps/cuda")
  if(r)
    list(APPEND _korovod_candidates "${r}")
    if(IS_DIRECTORY "${r}")
      list(APPEND _korovod_roots "${r}")
    endif()
  endif()
endforeach()
list(REMOVE_DUPLICATES _korovod_candidates)
list(REMOVE_DUPLICATES _korovod_roots)
_korovod_search_roots()

if(NOT _korovod_cudart_lib)
  _korovod_nccl_unavailable("no CUDA runtime (cuda_runtime_api.h + libcudart.so*) found")
  return()
endif()
if(NOT _korovod_nccl_lib)
  _korovod_nccl_unavailable("no NCCL (nccl.h + libnccl.so*) found")
  return()
endif()

file(STRINGS "${_korovod_nccl_include}/nccl.h" _defs REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
set(_korovod_nccl_version "")
foreach(part MAJOR MINOR PATCH)
  string(REGEX MATCH "NCCL_${part} +([0-9]+)" _m "${_defs}")
  list(APPEND _korovod_nccl_version "${CMAKE_MATCH_1}")
endforeach()
list(JOIN _korovod_nccl_version "." _korovod_nccl_version)
if(_korovod_nccl_version VERSION_LESS _korovod_nccl_min_version)
  _korovod_nccl_unavailable("NCCL ${_korovod_nccl_version} at ${_korovod_nccl_include} is older "
                            "than ${_korovod_nccl_min_version}")
  return()
endif()
list(GET _korovod_cudart_include 0 _inc0)
file(STRINGS "${_inc0}/cuda_runtime_api.h" _defs REGEX "^#define CUDART_VERSION ")
string(REGEX MATCH "([0-9]+)" _cudart "${_defs}")
math(EXPR _korovod_cuda_major "${_cudart} / 1000")
math(EXPR _korovod_cuda_minor "(${_cudart} % 1000) / 10")

# Headers and libraries can be found yet unusable (a wheel set missing crt/ or nv/ headers, a
# library for another architecture): prove that a program using both compiles and links, so AUTO
# falls back to CPU-only here rather than failing the build later.
include(CheckCXXSourceCompiles)
set(CMAKE_REQUIRED_INCLUDES ${_korovod_cudart_include} ${_korovod_nccl_include})
set(CMAKE_REQUIRED_LIBRARIES ${_korovod_nccl_lib} ${_korovod_cudart_lib})
set(CMAKE_REQUIRED_QUIET ON)
unset(KOROVOD_NCCL_USABLE CACHE)  # re-check every configure: the roots may have changed
check_cxx_source_compiles([[
#include <cuda_runtime_api.h>
#include <nccl.h>
int main() {
  int n = 0, v = 0;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  (void)config;
  return static_cast<int>(cudaGetDeviceCount(&n)) + static_cast<int>(ncclGetVersion(&v));
}
]] KOROVOD_NCCL_USABLE)
unset(CMAKE_REQUIRED_INCLUDES)
unset(CMAKE_REQUIRED_LIBRARIES)
unset(CMAKE_REQUIRED_QUIET)
if(NOT KOROVOD_NCCL_USABLE)
  _korovod_nccl_unavailable("a test program against ${_korovod_cudart_lib} and "
                            "${_korovod_nccl_lib} did not compile and link (see CMakeError.log)")
  return()
endif()

if(NOT TARGET korovod::cudart)
  add_library(korovod::cudart SHARED IMPORTED)
  set_target_properties(korovod::cudart PROPERTIES
    IMPORTED_LOCATION "${_korovod_cudart_lib}"
    INTERFACE_INCLUDE_DIRECTORIES "${_korovod_cudart_include}")
  add_library(korovod::nccl SHARED IMPORTED)
  set_target_properties(korovod::nccl PROPERTIES
    IMPORTED_LOCATION "${_korovod_nccl_lib}"
    INTERFACE_INCLUDE_DIRECTORIES "${_korovod_nccl_include}"
    INTERFACE_LINK_LIBRARIES korovod::cudart)
endif()
set(KOROVOD_HAVE_NCCL ON)
message(STATUS "korovod: NCCL backend ON (NCCL ${_korovod_nccl_version}: ${_korovod_nccl_lib}; "
               "CUDA runtime ${_korovod_cuda_major}.${_korovod_cuda_minor}: "
               "${_korovod_cudart_lib})")
