# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# Sanitizer build types. Tsan wants clang (gcc's TSan also reports the CK
# false positives, and only clang honours the ck_* ignore-list below).
set(TW_SANITIZER "")
set(_tw_bt "${CMAKE_BUILD_TYPE}")
if(_tw_bt STREQUAL "Tsan")
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "the Tsan build type needs clang: CC=clang CXX=clang++")
  endif()
  set(TW_SANITIZER thread)
  set(_tw_flags "-O1 -g -fno-omit-frame-pointer -fsanitize=thread \
-fsanitize-ignorelist=${CMAKE_CURRENT_SOURCE_DIR}/cmake/tsan-ignorelist.txt")
elseif(_tw_bt STREQUAL "Asan")
  set(TW_SANITIZER address)
  set(_tw_flags "-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined \
-fno-sanitize-recover=all")
endif()
if(TW_SANITIZER)
  foreach(_lang C CXX)
    string(TOUPPER "${_tw_bt}" _BT)
    set(CMAKE_${_lang}_FLAGS_${_BT} "${_tw_flags}" CACHE STRING "" FORCE)
  endforeach()
  set(CMAKE_EXE_LINKER_FLAGS_${_BT} "${_tw_flags}" CACHE STRING "" FORCE)
  set(CMAKE_SHARED_LINKER_FLAGS_${_BT} "${_tw_flags}" CACHE STRING "" FORCE)
endif()
