# Decides whether the NCCL backend is built. Sets KOROVOD_HAVE_NCCL.
# (Full CUDA/NCCL discovery lives here; see scripts/install-deps.sh for the wheel-based toolkit.)
set(KOROVOD_HAVE_NCCL OFF)
if(KOROVOD_WITH_NCCL STREQUAL "ON")
  message(FATAL_ERROR "KOROVOD_WITH_NCCL=ON but NCCL discovery is not configured yet")
endif()
message(STATUS "korovod: NCCL backend ${KOROVOD_HAVE_NCCL}")
