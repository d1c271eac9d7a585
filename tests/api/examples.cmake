# The programs of examples/, small, each checking its own result.
#
# tw_example_test(<program> <name> <np> <args...> [ENV <VAR=value...>])
#   twrun -n <np> <program> <args...> as example_<program>_<name>.
function(tw_example_test prog name np)
  set(_args ${ARGN})
  set(_env)
  list(FIND _args ENV _at)
  if(_at GREATER -1)
    math(EXPR _from "${_at} + 1")
    list(SUBLIST ARGN ${_from} -1 _env)
    list(SUBLIST ARGN 0 ${_at} _args)
  endif()
  set(_t ${TW_TEST_PREFIX}example_${prog}_${name})
  add_test(NAME ${_t} COMMAND twrun -n ${np} $<TARGET_FILE:${prog}> ${_args})
  set_tests_properties(${_t} PROPERTIES LABELS "api;examples" TIMEOUT 120
                       ENVIRONMENT "${TW_TEST_ENV};${_env}")
endfunction()

# stencil: its grid bit for bit and its residual against a serial
# computation; both wait styles, with progress threads and in manual
# mode, over shm, and over tcp with 3 processes and uneven strips.
set(_grid -x 128 -y 96 -s 40)
tw_example_test(stencil wait 2 ${_grid} -t 4)
tw_example_test(stencil poll 2 ${_grid} -t 4 --poll)
tw_example_test(stencil manual_wait 2 ${_grid} -t 2 ENV TW_PROGRESS_THREADS=0)
tw_example_test(stencil manual_poll 2 ${_grid} -t 2 --poll ENV TW_PROGRESS_THREADS=0)
tw_example_test(stencil tcp_n3 3 ${_grid} -t 3 -y 100 ENV TW_TRANSPORTS=self,tcp)

# put_ring: every block checked at its target, every round; over shm, over
# tcp with 3 processes and odd sizes, in manual mode (the targets' waits
# serve the puts), and a job of one (the self transport).
tw_example_test(put_ring n2 2 -t 4 -r 60)
tw_example_test(put_ring tcp_n3 3 -t 2 -b 1000 -r 40 ENV TW_TRANSPORTS=self,tcp)
tw_example_test(put_ring manual 2 -t 2 -r 40 ENV TW_PROGRESS_THREADS=0)
tw_example_test(put_ring n1 1 -t 3 -r 40)

# tasks: every task answered once and every answer checked at its origin;
# over shm, over tcp with 3 processes and blocks large enough to go
# zero-copy, in manual mode (the handlers run in the threads' waits), and
# a job of one (tasks to itself).
tw_example_test(tasks n2 2 -n 4000 -t 4)
tw_example_test(tasks tcp_n3 3 -n 1500 -t 2 -b 20000 ENV TW_TRANSPORTS=self,tcp)
tw_example_test(tasks manual 2 -n 3000 -t 2 ENV TW_PROGRESS_THREADS=0)
tw_example_test(tasks n1 1 -n 3000 -t 3)
