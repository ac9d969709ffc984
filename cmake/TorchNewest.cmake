# The two torches of the tests: Debian's torch 1.13 (KOROVOD_TEST_PYTHON, /usr/bin/python3) and
# the newest from the Python package index, which most users run. Every torch test runs on both
# (tests/README.md#two-torches).
#
# KOROVOD_TORCH_NEWEST_PYTHON: a Python interpreter with the newest torch. Given with -D, it is
# used (it must import torch, numpy and pytest; OFF or an empty value turns the second run off);
# else $KOROVOD_DEPS_DIR/torch-venv/bin/python, by default <repo>/.deps/torch-venv/bin/python
# (scripts/install-deps.sh --torch-newest), when it imports them; else it stays undefined and
# the *_torch_newest tests are not registered (said here). korovod's extension is pybind11 over
# the client, not torch's C++ ABI: the one build serves both interpreters (both Python 3.11).
#
# korovod_add_torch_test(NAME <name> COMMAND <args...> [LABELS ...] [TIMEOUT s]
#                        [ENVIRONMENT VAR=value...] [NEWEST_ENVIRONMENT VAR=value...]
#                        [SKIP_REGULAR_EXPRESSION re] [SKIP_RETURN_CODE code] [ONCE])
#   registers <name> for ${KOROVOD_TEST_PYTHON} (the caller's) and, when the newest torch was
#   found, <name>_torch_newest for it, labelled torch_newest too. @PYTHON@ in COMMAND and
#   ENVIRONMENT stands for the interpreter; NEWEST_ENVIRONMENT is added for the newest alone.
#   ONCE registers <name> alone: for a test of nothing that depends on torch's version (say why
#   beside it).
include_guard(GLOBAL)

# The first interpreter: Debian's, with torch 1.13.
if(NOT DEFINED KOROVOD_TEST_PYTHON)
  if(EXISTS /usr/bin/python3)
    set(KOROVOD_TEST_PYTHON /usr/bin/python3)
  else()
    set(KOROVOD_TEST_PYTHON ${Python3_EXECUTABLE})
  endif()
endif()

# Probed at each configure (a torch import, a few seconds), as the TensorFlow Python is; only a
# value given with -D is cached. Test with if(KOROVOD_TORCH_NEWEST_PYTHON): OFF reads false.
set(_korovod_torch_probe "import torch, numpy, pytest; print(torch.__version__)")
if(DEFINED CACHE{KOROVOD_TORCH_NEWEST_PYTHON})
  set(_korovod_torch_newest "$CACHE{KOROVOD_TORCH_NEWEST_PYTHON}")
  set(_korovod_torch_newest_given TRUE)
else()
  set(_korovod_torch_newest "${PROJECT_SOURCE_DIR}/.deps/torch-venv/bin/python")
  if(DEFINED ENV{KOROVOD_DEPS_DIR})  # where install-deps.sh put it
    set(_korovod_torch_newest "$ENV{KOROVOD_DEPS_DIR}/torch-venv/bin/python")
  endif()
  set(_korovod_torch_newest_given FALSE)
endif()
set(KOROVOD_TORCH_NEWEST_VERSION "")
if(_korovod_torch_newest AND EXISTS "${_korovod_torch_newest}")
  execute_process(COMMAND "${_korovod_torch_newest}" -c "${_korovod_torch_probe}"
                  RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(_rc EQUAL 0)
    set(KOROVOD_TORCH_NEWEST_VERSION "${_out}")
  elseif(_korovod_torch_newest_given)
    message(FATAL_ERROR "KOROVOD_TORCH_NEWEST_PYTHON=${_korovod_torch_newest} cannot import "
                        "torch, numpy and pytest:\n${_err}")
  endif()
elseif(_korovod_torch_newest_given AND _korovod_torch_newest)
  message(FATAL_ERROR "KOROVOD_TORCH_NEWEST_PYTHON=${_korovod_torch_newest}: no such file")
endif()
if(KOROVOD_TORCH_NEWEST_VERSION)
  set(KOROVOD_TORCH_NEWEST_PYTHON "${_korovod_torch_newest}")
  message(STATUS "torch ${KOROVOD_TORCH_NEWEST_VERSION} (${KOROVOD_TORCH_NEWEST_PYTHON}): the "
                 "torch tests are registered again as *_torch_newest")
elseif(_korovod_torch_newest_given AND NOT _korovod_torch_newest)
  message(STATUS "KOROVOD_TORCH_NEWEST_PYTHON=${_korovod_torch_newest}: no *_torch_newest tests")
else()
  message(STATUS "The newest torch not found: no *_torch_newest tests "
                 "(scripts/install-deps.sh --torch-newest, or -DKOROVOD_TORCH_NEWEST_PYTHON)")
endif()

function(korovod_add_torch_test)
  cmake_parse_arguments(T "ONCE" "NAME;TIMEOUT;SKIP_REGULAR_EXPRESSION;SKIP_RETURN_CODE"
                        "COMMAND;LABELS;ENVIRONMENT;NEWEST_ENVIRONMENT" ${ARGN})
  if(NOT T_NAME OR NOT T_COMMAND OR NOT T_TIMEOUT OR NOT T_LABELS)
    message(FATAL_ERROR "korovod_add_torch_test needs NAME, COMMAND, LABELS and TIMEOUT")
  endif()
  set(variants "${T_NAME}|${KOROVOD_TEST_PYTHON}|")
  if(KOROVOD_TORCH_NEWEST_PYTHON AND NOT T_ONCE)
    list(APPEND variants "${T_NAME}_torch_newest|${KOROVOD_TORCH_NEWEST_PYTHON}|torch_newest")
  endif()
  foreach(variant IN LISTS variants)
    string(REPLACE "|" ";" parts "${variant}")
    list(GET parts 0 name)
    list(GET parts 1 python)
    list(GET parts 2 extra_label)
    string(REPLACE "@PYTHON@" "${python}" command "${T_COMMAND}")
    set(environment ${T_ENVIRONMENT})
    if(extra_label)
      list(APPEND environment ${T_NEWEST_ENVIRONMENT})
    endif()
    string(REPLACE "@PYTHON@" "${python}" environment "${environment}")
    add_test(NAME ${name} COMMAND ${command})
    set(labels ${T_LABELS} ${extra_label})
    set_tests_properties(${name} PROPERTIES LABELS "${labels}" TIMEOUT ${T_TIMEOUT})
    if(environment)
      set_tests_properties(${name} PROPERTIES ENVIRONMENT "${environment}")
    endif()
    if(DEFINED T_SKIP_REGULAR_EXPRESSION)
      set_tests_properties(${name} PROPERTIES
                           SKIP_REGULAR_EXPRESSION "${T_SKIP_REGULAR_EXPRESSION}")
    endif()
    if(DEFINED T_SKIP_RETURN_CODE)
      set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE ${T_SKIP_RETURN_CODE})
    endif()
  endforeach()
endfunction()
