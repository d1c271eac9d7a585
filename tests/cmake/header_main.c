/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/* Every header was compiled alone in its own translation unit (C and C++
 * for public headers); reaching main means they all built. */
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    int pub = argc > 1 ? atoi(argv[1]) : 0, internal = argc > 2 ? atoi(argv[2]) : 0;
    printf("%d public headers (C and C++) and %d internal headers compile on their own\n", pub,
           internal);
    return pub > 0 && internal > 0 ? 0 : 1;
}
