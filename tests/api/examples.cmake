# The programs of examples/, small, each checking its own result (the
# stencil: its grid bit for bit and its residual against a serial
# computation): both wait styles, with progress threads and in manual
# mode, over shm and over tcp with uneven strips.
foreach(_v "wait;-t;4"
           "poll;-t;4;--poll"
           "manual_wait;-t;2;ENV;TW_PROGRESS_THREADS=0"
           "manual_poll;-t;2;--poll;ENV;TW_PROGRESS_THREADS=0"
           "tcp_n3;-t;3;-y;100;ENV;TW_TRANSPORTS=self,tcp")
  list(GET _v 0 _name)
  list(SUBLIST _v 1 -1 _rest)
  list(FIND _rest ENV _at)
  set(_env)
  set(_args ${_rest})
  if(_at GREATER -1)
    list(SUBLIST _rest 0 ${_at} _args)
    math(EXPR _from "${_at} + 1")
    list(SUBLIST _rest ${_from} -1 _env)
  endif()
  set(_np 2)
  if(_name MATCHES "_n3$")
    set(_np 3)
  endif()
  add_test(NAME ${TW_TEST_PREFIX}example_stencil_${_name}
           COMMAND twrun -n ${_np} $<TARGET_FILE:stencil> -x 128 -y 96 -s 40 ${_args})
  set_tests_properties(${TW_TEST_PREFIX}example_stencil_${_name} PROPERTIES
    LABELS "api;examples" TIMEOUT 120 ENVIRONMENT "${TW_TEST_ENV};${_env}")
endforeach()
