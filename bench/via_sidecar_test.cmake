# ctest driver for `korovod-bench --via sidecar` (cmake -P; no timing is asserted):
#   -DMODE=rows    the rows of a quick run through real sidecars over shm and tcp carry the
#                  "+sidecar" transport label, are verified and have no "error"; with
#                  PEERBENCH_INJECT_FAULT every row is an error and the exit status 3
#   -DMODE=errors  a missing sidecar binary and a sidecar that fails at start-up end the run with
#                  a message that names the cause, and a non-zero exit status
# -DBENCH=path/to/korovod-bench, -DWORK_DIR=a scratch directory.
cmake_minimum_required(VERSION 3.25)

function(run_bench out_var err_var rc_var)
  execute_process(COMMAND ${BENCH} ${ARGN} OUTPUT_VARIABLE out ERROR_VARIABLE err
                  RESULT_VARIABLE rc TIMEOUT 120)
  set(${out_var} "${out}" PARENT_SCOPE)
  set(${err_var} "${err}" PARENT_SCOPE)
  set(${rc_var} "${rc}" PARENT_SCOPE)
endfunction()

# expect("what went wrong" CONDITION...): the condition as if() takes it.
macro(expect what)
  if(NOT (${ARGN}))
    message(FATAL_ERROR "${what}")
  endif()
endmacro()

# The JSON rows of `out` (lines starting with "{" that have a "peer" key, as run_peers.sh keeps).
function(json_rows out_var text)
  string(REPLACE "\n" ";" lines "${text}")
  set(rows "")
  foreach(line IN LISTS lines)
    if(line MATCHES "^{")
      string(JSON peer ERROR_VARIABLE no_peer GET "${line}" peer)
      if(NOT no_peer)
        list(APPEND rows "${line}")
      endif()
    endif()
  endforeach()
  set(${out_var} "${rows}" PARENT_SCOPE)
endfunction()

set(common allreduce --via sidecar --ranks 2 --sizes 4,64K --target-time 0.05 --min-iters 3)

if(MODE STREQUAL "rows")
  run_bench(out err rc ${common} --transport shm,tcp)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "korovod-bench exited with ${rc}\nstdout:\n${out}\nstderr:\n${err}")
  endif()
  json_rows(rows "${out}")
  list(LENGTH rows count)
  expect("expected 4 rows (2 sizes x shm, tcp), got ${count}:\n${out}" count EQUAL 4)
  set(want_transport shm+sidecar shm+sidecar tcp+sidecar tcp+sidecar)
  set(want_bytes 4 65536 4 65536)
  foreach(i RANGE 3)
    list(GET rows ${i} row)
    list(GET want_transport ${i} transport)
    list(GET want_bytes ${i} bytes)
    string(JSON got_transport GET "${row}" transport)
    string(JSON got_bytes GET "${row}" bytes)
    string(JSON got_ranks GET "${row}" ranks)
    string(JSON got_peer GET "${row}" peer)
    string(JSON got_op GET "${row}" op)
    string(JSON verified ERROR_VARIABLE no_verified GET "${row}" verified)
    string(JSON error_text ERROR_VARIABLE no_error GET "${row}" error)
    string(JSON busbw ERROR_VARIABLE no_busbw GET "${row}" busbw_gbps)
    expect("row ${i}: transport ${got_transport}, want ${transport}: ${row}"
           got_transport STREQUAL transport)
    expect("row ${i}: bytes ${got_bytes}, want ${bytes}: ${row}" got_bytes EQUAL bytes)
    expect("row ${i}: ranks ${got_ranks}: ${row}" got_ranks EQUAL 2)
    expect("row ${i}: peer ${got_peer}: ${row}" got_peer STREQUAL korovod)
    expect("row ${i}: op ${got_op}: ${row}" got_op STREQUAL allreduce)
    expect("row ${i} is not verified: ${row}" NOT no_verified AND verified)
    expect("row ${i} has an error (${error_text}): ${row}" no_error)
    expect("row ${i} has no busbw_gbps: ${row}" NOT no_busbw)
    string(JSON loop_us ERROR_VARIABLE no_loop GET "${row}" time_us_loop)
    expect("row ${i} has no time_us_loop (the loop is on by default): ${row}" NOT no_loop)
  endforeach()

  # --no-loop is accepted and skips the back-to-back loop: no row carries its time.
  run_bench(out err rc ${common} --transport shm --no-loop)
  expect("--no-loop: korovod-bench exited with ${rc}:\n${err}" rc EQUAL 0)
  json_rows(rows "${out}")
  list(LENGTH rows count)
  expect("--no-loop: expected 2 rows, got ${count}:\n${out}" count EQUAL 2)
  foreach(row IN LISTS rows)
    string(JSON loop_us ERROR_VARIABLE no_loop GET "${row}" time_us_loop)
    expect("--no-loop: the row carries time_us_loop: ${row}" no_loop)
  endforeach()

  # The verification through the sidecar is live: a corrupted element turns every row into an error.
  set(ENV{PEERBENCH_INJECT_FAULT} 1)
  run_bench(out err rc ${common})
  unset(ENV{PEERBENCH_INJECT_FAULT})
  expect("with PEERBENCH_INJECT_FAULT korovod-bench exited with ${rc}, want 3:\n${err}"
         rc EQUAL 3)
  json_rows(rows "${out}")
  list(LENGTH rows count)
  expect("expected 2 error rows, got ${count}:\n${out}" count EQUAL 2)
  foreach(row IN LISTS rows)
    string(JSON error_text ERROR_VARIABLE no_error GET "${row}" error)
    expect("row is not an error: ${row}"
           NOT no_error AND error_text STREQUAL "verification failed")
  endforeach()

elseif(MODE STREQUAL "errors")
  run_bench(out err rc ${common} --sidecar-binary ${WORK_DIR}/no-such-sidecar)
  expect("missing sidecar: exit status ${rc}, want 2:\n${err}" rc EQUAL 2)
  expect("missing sidecar: unclear message:\n${err}"
         err MATCHES "no executable korovod-sidecar at .*no-such-sidecar")

  # A sidecar that fails at start-up, as one with a bad environment does.
  file(MAKE_DIRECTORY ${WORK_DIR})
  set(failing ${WORK_DIR}/failing-sidecar.sh)
  file(WRITE ${failing}
       "#!/bin/sh\necho \"korovod-sidecar: KOROVOD_PEERS is broken\" >&2\nexit 3\n")
  file(CHMOD ${failing} PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE)
  run_bench(out err rc ${common} --sidecar-binary ${failing})
  expect("failing sidecar: exit status ${rc}, want 1:\n${err}" rc EQUAL 1)
  expect("failing sidecar: the message does not name the rank and the cause:\n${err}"
         err MATCHES "rank [01] sidecar .* exited with code 3 before creating its socket")
  expect("failing sidecar: its log is not quoted:\n${err}" err MATCHES "KOROVOD_PEERS is broken")
  json_rows(rows "${out}")
  expect("failing sidecar: rows were printed:\n${out}" NOT rows)
else()
  message(FATAL_ERROR "MODE must be rows or errors, not '${MODE}'")
endif()
