# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# The collectives (tests/multiproc/test_coll.c), every result checked
# exactly against a serial computation on every rank:
#   basic        every collective, dtype, op, root, 0 B .. 4 MiB, in place
#                and not, on the world group and on subgroups: 1 .. 4
#                ranks; over tcp alone; on emulated nodes (TW_NODE_ID:
#                2 nodes of 2, 3 nodes of 1: leaders and point-to-point
#                trees); without shared-memory slot sets (TW_COLL_SLOTS=0:
#                the point-to-point algorithms within a node); large bcasts
#                through the cells instead of one copy (TW_COLL_CMA=0);
#                every allreduce by one copy between 2 ranks
#                (TW_COLL_CMA_ALLREDUCE=1: from 1 byte, so slices of 0
#                elements too; not used where ranks outnumber the CPUs);
#                allreduce by Rabenseifner (TW_COLL_RSAG=1 or 64: from 1 or
#                64 bytes, so the small counts take it too, with uneven
#                blocks, and counts below the power of two fall back) point
#                to point among 3, 4, 5 ranks (TW_COLL_SLOTS=0, tcp alone),
#                and among the representatives of 3 emulated nodes (shm
#                within the nodes, or point-to-point trees); barriers
#                flat and gathered (TW_COLL_BARRIER: auto picks by the
#                machine's CPUs, so both are named).
#   threads      threads creating their own groups at once and running
#                mixed rounds; two threads on one group (TW_ERR_INVALID
#                while the other's collective is outstanding); with
#                TW_COLL_SLOTS=2 (one slot set besides the world's) most
#                groups run point to point within the node beside one in shm;
#                barriers flat and gathered (TW_COLL_BARRIER).
#   nonblocking  nonblocking collectives on two groups at once, overlapped
#                with computation and a ring of tw_send / tw_recv on the
#                same CQ; progress threads and manual mode; random counts
#                by Rabenseifner (TW_COLL_RSAG=1) on engine 0.
#   leave        large allreduces and bcasts, then tw_finalize with no
#                barrier: the last rendezvous sends, complete on their
#                senders, are still read (point to point, over tcp, shm).
#   errors       bad arguments refused at once (TW_ERR_INVALID).
add_executable(test_coll test_coll.c)
target_link_libraries(test_coll PRIVATE threadwire tw_testlib tw_mp m)
set(_coll_basic_tests "")
# name; ranks; test_coll arguments; environment.
foreach(_v "basic_n1;1;--mode basic;" "basic_n2;2;--mode basic;" "basic_n3;3;--mode basic;"
           "basic_n4;4;--mode basic;"
           "basic_flat_n4;4;--mode basic;TW_COLL_BARRIER=flat"
           "basic_gather_n3;3;--mode basic;TW_COLL_BARRIER=gather"
           "basic_tcp_n3;3;--mode basic;TW_TRANSPORTS=tcp"
           "basic_nodes2_n4;4;--mode basic;TW_NODE_ID=0,0,1,1"
           "basic_nodes3_n3;3;--mode basic;TW_NODE_ID=0,1,2"
           "basic_noslots_n3;3;--mode basic;TW_COLL_SLOTS=0"
           "basic_nocma_n3;3;--mode basic;TW_COLL_CMA=0"
           "basic_cma_ar_n2;2;--mode basic;TW_COLL_CMA_ALLREDUCE=1"
           "basic_rsag_n3;3;--mode basic;TW_COLL_SLOTS=0;TW_COLL_RSAG=1"
           "basic_rsag_n4;4;--mode basic;TW_COLL_SLOTS=0;TW_COLL_RSAG=64"
           "basic_rsag_tcp_n5;5;--mode basic;TW_TRANSPORTS=self,tcp;TW_COLL_RSAG=1"
           "basic_rsag_nodes3_n6;6;--mode basic;TW_NODE_ID=0,0,1,1,2,2;TW_COLL_RSAG=64"
           "basic_rsag_nodes3_noslots_n5;5;--mode basic;TW_NODE_ID=0,0,1,1,2;TW_COLL_SLOTS=0;TW_COLL_RSAG=1"
           "threads_n2;2;--mode threads -t 3;" "threads_n3;3;--mode threads -t 2;"
           "threads_tcp_n3;3;--mode threads -t 2;TW_TRANSPORTS=tcp"
           "threads_slots2_n3;3;--mode threads -t 2;TW_COLL_SLOTS=2"
           "threads_flat_n3;3;--mode threads -t 2;TW_COLL_BARRIER=flat"
           "threads_gather_n3;3;--mode threads -t 2;TW_COLL_BARRIER=gather"
           "nonblocking_n2;2;--mode nonblocking -t 2 -m 400;"
           "nonblocking_n3;3;--mode nonblocking -t 2 -m 400;"
           "nonblocking_n2_manual;2;--mode nonblocking -t 2 -m 400;TW_PROGRESS_THREADS=0"
           "nonblocking_n3_manual;3;--mode nonblocking -t 2 -m 400;TW_PROGRESS_THREADS=0"
           "nonblocking_gather_n3;3;--mode nonblocking -t 2 -m 400;TW_COLL_BARRIER=gather"
           "nonblocking_rsag_n5;5;--mode nonblocking -t 2 -m 400;TW_COLL_SLOTS=0;TW_COLL_RSAG=1"
           "leave_noslots_n5;5;--mode leave;TW_COLL_SLOTS=0"
           "leave_tcp_n4;4;--mode leave;TW_TRANSPORTS=self,tcp"
           "leave_n3;3;--mode leave;"
           "errors_n2;2;--mode errors;")
  list(GET _v 0 _name)
  if(_name MATCHES "^basic_")
    list(APPEND _coll_basic_tests ${_name})
  endif()
  list(GET _v 1 _np)
  list(GET _v 2 _a)
  separate_arguments(_args UNIX_COMMAND "${_a}")
  list(SUBLIST _v 3 -1 _env)
  add_test(NAME ${TW_TEST_PREFIX}coll_${_name}
           COMMAND twrun -n ${_np} $<TARGET_FILE:test_coll> ${_args} --max-stall 20)
  set_tests_properties(${TW_TEST_PREFIX}coll_${_name} PROPERTIES
    LABELS multiproc TIMEOUT 120 ENVIRONMENT "${TW_TEST_ENV};${_env}")
endforeach()

# nonblocking_tcp_sends: a step's send that engine 0's owner posts (the
# pass that runs nonblocking collectives, in manual mode the caller's
# tw_progress) is written at once, not handed to the engine's submission
# ring (which a worker spinning beside the engine's thread kept waiting
# 400-900 us): at most one frame per peer is handed -- the first, sent
# before its connection is up (tl:tcp's handed counter).
add_test(NAME ${TW_TEST_PREFIX}coll_nonblocking_tcp_sends
         COMMAND sh -c "out=$(\"$0\" -n 3 \"$1\" --mode nonblocking -t 1 -m 100 --max-stall 20 2>&1); \
rc=$?; printf '%s\\n' \"$out\"; [ $rc -eq 0 ] && printf '%s\\n' \"$out\" | \"$2\" - \
'all ifaces/tl:tcp/handed <= 2' 'all ifaces/tl:tcp/tx_msgs >= 20' 'all coll/sent >= 20'"
                 $<TARGET_FILE:twrun> $<TARGET_FILE:test_coll>
                 ${PROJECT_SOURCE_DIR}/tests/common/twt_stats.py)
set_tests_properties(${TW_TEST_PREFIX}coll_nonblocking_tcp_sends PROPERTIES
  LABELS multiproc TIMEOUT 120 ENVIRONMENT
  "${TW_TEST_ENV};TW_TRANSPORTS=tcp;TW_PROGRESS_THREADS=0;TW_COLL_SLOTS=0;TW_COLL_RSAG=1;TW_STATS=json")

# The node's ranks disagree about the segment (coll_node_test.sh): a rank
# that cannot attach, a leader without one; about TW_COLL_BARRIER (the
# leader's holds); and about TW_COLL_RSAG, which must be the same job-wide
# (tw_init fails).
foreach(_case attach leader rsag barrier)
  add_test(NAME ${TW_TEST_PREFIX}coll_node_${_case}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/coll_node_test.sh $<TARGET_FILE:twrun>
                   $<TARGET_FILE:test_coll> ${_case})
  set_tests_properties(${TW_TEST_PREFIX}coll_node_${_case} PROPERTIES
    LABELS multiproc TIMEOUT 120 ENVIRONMENT "${TW_TEST_ENV}")
  if(NOT _case STREQUAL "rsag")
    list(APPEND _coll_basic_tests node_${_case})
  endif()
endforeach()
# coll_node_rsag: a rank refuses another's TW_COLL_RSAG at tw_init.
tw_expect_log(coll_node_rsag PATTERNS
  "init. error: rank [0-9]+ has TW_COLL_RSAG=[0-9]+ bytes and this rank [0-9]+: set it alike on every rank .the allreduce's algorithm, and so its messages, depend on it.$")

# ---- the log lines the cases provoke on purpose (tests/README.md) ----
# A bitwise operator on a floating type, refused on purpose (basic: every
# dtype x op; threads: a few of the mixed rounds).
set(_coll_float_bitwise
  "api. error: tw_i?(reduce|allreduce): operator [A-Za-z_]+ .[456]. does not apply to [A-Za-z_]+$")
foreach(_t ${_coll_basic_tests} threads_n2 threads_n3 threads_tcp_n3 threads_slots2_n3
           threads_flat_n3 threads_gather_n3)
  tw_expect_log(coll_${_t} PATTERNS "${_coll_float_bitwise}")
endforeach()
# coll_node_attach: rank 2 does not attach, ranks 0 and 1 see it.
tw_expect_log(coll_node_attach PATTERNS
  "coll. warn: cannot attach the collectives' segment of rank 0 .protocol error.: point to point$"
  "coll. warn: a rank of this node could not attach the collectives' segment: the world group runs point to point here$")
# threads: the other thread's collectives on a group whose iallreduce is
# held outstanding, refused on purpose.
set(_coll_busy
  "coll. error: i?(barrier|bcast|reduce|allreduce): another collective is outstanding on this group .one at a time per group.$")
tw_expect_log(coll_threads_n2 coll_threads_n3 coll_threads_tcp_n3 coll_threads_slots2_n3
              coll_threads_flat_n3 coll_threads_gather_n3 PATTERNS
  "${_coll_busy}")
# tests/cluster runs test_coll across nodes: the same lines.
set(TW_LOG_COLL_FLOAT_BITWISE "${_coll_float_bitwise}" PARENT_SCOPE)
set(TW_LOG_COLL_BUSY "${_coll_busy}" PARENT_SCOPE)
# errors: every bad argument, on purpose.
tw_expect_log(coll_errors_n2 PATTERNS
  "${_coll_float_bitwise}"
  "api. error: tw_i?(barrier|bcast|reduce|allreduce): NULL group$"
  "api. error: tw_i?(bcast|reduce): root -?[0-9]+ is not a member .group of [0-9]+.$"
  "api. error: tw_i?(reduce|allreduce): -?[0-9]+ is not a tw_dtype_t$"
  "api. error: tw_i?(reduce|allreduce): operator [A-Za-z_?]+ .-?[0-9]+. does not apply to [A-Za-z_0-9]+$"
  "api. error: tw_i?(reduce|allreduce): NULL (sendbuf|recvbuf) with [0-9]+ elements$"
  "api. error: tw_i?bcast: NULL buffer with [0-9]+ bytes$"
  "api. error: tw_i(barrier|allreduce): NULL completion queue$"
  "api. error: tw_group_create: (NULL ranks|NULL g|n out of range|NULL context|ranks.[0-9]+. = -?[0-9]+ is not in the job .size [0-9]+.|rank [0-9]+ is listed twice|the caller .rank [0-9]+. is not in the list)$"
  "api. error: tw_group_destroy: (NULL group|the world group is tw_finalize's to free|a collective is still outstanding on the group)$")
