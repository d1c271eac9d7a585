# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# Dependencies, all from Debian packages (tools/install-deps.sh installs them).
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)

pkg_check_modules(CK REQUIRED IMPORTED_TARGET ck)
pkg_check_modules(LIBEVENT REQUIRED IMPORTED_TARGET libevent_core libevent_pthreads)
pkg_check_modules(HWLOC REQUIRED IMPORTED_TARGET hwloc)
set(TW_HAVE_HWLOC 1)

# jemalloc backs src/core/tw_mem in normal builds; sanitizer builds use libc
# malloc so ASan/TSan/LSan see every allocation.
if(TW_SANITIZER)
  set(TW_SANITIZER_BUILD 1)
  set(TW_HAVE_JEMALLOC 0)
else()
  set(TW_SANITIZER_BUILD 0)
  pkg_check_modules(JEMALLOC REQUIRED IMPORTED_TARGET jemalloc)
  set(TW_HAVE_JEMALLOC 1)
endif()

# AUTO|ON|OFF optional dependencies: the verbs transport, the PMIx bootstrap.
function(tw_optional_dep opt pcname var)
  set(${var} 0 PARENT_SCOPE)
  if(${opt} STREQUAL "OFF")
    return()
  endif()
  pkg_check_modules(${var}_PC QUIET IMPORTED_TARGET ${pcname})
  if(${var}_PC_FOUND)
    set(${var} 1 PARENT_SCOPE)
    message(STATUS "threadwire: ${pcname} found (${opt})")
  elseif(${opt} STREQUAL "ON")
    message(FATAL_ERROR "threadwire: ${pcname} requested (ON) but not found")
  else()
    message(STATUS "threadwire: ${pcname} not found; disabled")
  endif()
endfunction()
tw_optional_dep(TW_ENABLE_VERBS libibverbs TW_HAVE_VERBS)
tw_optional_dep(TW_WITH_PMIX pmix TW_HAVE_PMIX)
