/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
#include "threadwire/threadwire.h"

TW_API const char *tw_strerror(tw_status_t st)
{
    switch (st) {
    case TW_OK:
        return "success";
    case TW_ERR_INVALID:
        return "invalid argument";
    case TW_ERR_NOMEM:
        return "out of memory";
    case TW_ERR_AGAIN:
        return "resource temporarily unavailable";
    case TW_ERR_TRUNCATED:
        return "message truncated";
    case TW_ERR_TIMEOUT:
        return "timed out";
    case TW_ERR_CANCELED:
        return "operation canceled";
    case TW_ERR_UNREACHABLE:
        return "destination unreachable";
    case TW_ERR_PEER_FAILED:
        return "peer failed";
    case TW_ERR_TRANSPORT:
        return "transport error";
    case TW_ERR_PROTOCOL:
        return "protocol error";
    case TW_ERR_UNSUPPORTED:
        return "operation not supported";
    case TW_ERR_BOOTSTRAP:
        return "bootstrap failed";
    }
    return "unknown status";
}
