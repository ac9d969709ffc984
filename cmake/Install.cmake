# Install rules. `pip install .` (pyproject.toml, scikit-build-core) runs them with SKBUILD set:
# the executables go to the wheel's scripts directory, which pip installs on PATH (<venv>/bin,
# /usr/local/bin), and the compiled client goes beside the Python sources that scikit-build-core
# copies from python/ (wheel.packages). korovodrun and korovod-sidecar must land in the same
# directory: korovodrun looks for the sidecar next to its own executable.
#
# A plain `cmake --install` puts the executables in <prefix>/bin, and the Python packages in
# KOROVOD_INSTALL_PYTHONDIR when that is set (e.g. /usr/local/lib/python3.11/dist-packages).
# Targets are referred to by name: their folders may move.
include(GNUInstallDirs)

set(KOROVOD_INSTALL_PYTHONDIR "" CACHE PATH
    "cmake --install: where the korovod and horovod Python packages go (empty: not installed)")

if(SKBUILD)
  set(_korovod_bin_dir "${SKBUILD_SCRIPTS_DIR}")
  set(_korovod_py_dir "${SKBUILD_PLATLIB_DIR}")
  # A wheel without the client or without the launcher installs a package that cannot run a job:
  # fail the build, saying what is missing, instead.
  foreach(_korovod_target korovodrun korovod-sidecar korovod_python_client)
    if(NOT TARGET ${_korovod_target})
      message(FATAL_ERROR
        "pip install: the ${_korovod_target} target is not built. korovod_python_client needs "
        "pybind11-dev and python3-dev (Debian; bash scripts/install-deps.sh installs them) and "
        "KOROVOD_SANITIZE=OFF; see the CMake messages above.")
    endif()
  endforeach()
else()
  set(_korovod_bin_dir "${CMAKE_INSTALL_BINDIR}")
  set(_korovod_py_dir "${KOROVOD_INSTALL_PYTHONDIR}")
endif()

set(_korovod_programs korovodrun korovod-sidecar)
if(TARGET korovod-timeline)
  list(APPEND _korovod_programs korovod-timeline)  # merges the per-rank timeline files
endif()
install(TARGETS ${_korovod_programs} RUNTIME DESTINATION "${_korovod_bin_dir}")

if(_korovod_py_dir AND TARGET korovod_python_client)
  install(TARGETS korovod_python_client LIBRARY DESTINATION "${_korovod_py_dir}/korovod")
  if(TARGET korovod_tf_ops)  # built against the TensorFlow of the interpreter being installed for
    install(TARGETS korovod_tf_ops LIBRARY DESTINATION "${_korovod_py_dir}/korovod/tensorflow")
  endif()
  if(NOT SKBUILD)
    # scikit-build-core copies these itself (wheel.packages); cmake --install has to.
    install(DIRECTORY "${PROJECT_SOURCE_DIR}/python/korovod" "${PROJECT_SOURCE_DIR}/python/horovod"
            DESTINATION "${_korovod_py_dir}"
            PATTERN "__pycache__" EXCLUDE
            PATTERN "*.pyc" EXCLUDE)
  endif()
endif()
