/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Machine topology through hwloc: loaded once per process on first use
 * (pthread_once), read-only afterwards (hwloc allows concurrent readers),
 * freed by a destructor at exit so leak checkers see nothing outstanding.
 */
#include <errno.h>
#include <hwloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "core/tw_log.h"
#include "progress/tw_pe.h"

static pthread_once_t tw_topo_once = PTHREAD_ONCE_INIT;
/* Written once inside pthread_once, read-only afterwards. */
static hwloc_topology_t tw_topo;
static bool tw_topo_ok;

static void tw_topo_load(void)
{
    hwloc_topology_t t;

    if (hwloc_topology_init(&t) != 0) {
        tw_warn("progress", "hwloc_topology_init failed: %m");
        return;
    }
    if (hwloc_topology_load(t) != 0) {
        tw_warn("progress", "hwloc_topology_load failed: %m");
        hwloc_topology_destroy(t);
        return;
    }
    tw_topo = t;
    tw_topo_ok = true;
}

__attribute__((destructor)) static void tw_topo_unload(void)
{
    if (tw_topo_ok) {
        tw_topo_ok = false;
        hwloc_topology_destroy(tw_topo);
    }
}

static bool tw_topo_get(void)
{
    pthread_once(&tw_topo_once, tw_topo_load);
    return tw_topo_ok;
}

int tw_topo_num_packages(void)
{
    int n;

    if (!tw_topo_get()) {
        return 1;
    }
    n = hwloc_get_nbobjs_by_type(tw_topo, HWLOC_OBJ_PACKAGE);
    return n >= 1 ? n : 1;
}

tw_status_t tw_topo_bind_package(int package, char *text, size_t len)
{
    hwloc_obj_t obj;

    if (!tw_topo_get()) {
        return TW_ERR_TRANSPORT;
    }
    obj = hwloc_get_obj_by_type(tw_topo, HWLOC_OBJ_PACKAGE, (unsigned)package);
    if (obj == NULL && package == 0 && hwloc_get_nbobjs_by_type(tw_topo, HWLOC_OBJ_PACKAGE) <= 0) {
        /* No package objects reported (some VMs): the machine is one. */
        obj = hwloc_get_root_obj(tw_topo);
    }
    if (obj == NULL || obj->cpuset == NULL) {
        return TW_ERR_INVALID;
    }
    /* Stay inside the CPUs we were given (taskset, cgroups, the caller's
     * binding): bind to the package's CPUs among those, or keep what we
     * inherited when they do not meet. */
    hwloc_bitmap_t set = hwloc_bitmap_alloc(), cur = hwloc_bitmap_alloc();
    tw_status_t st = TW_OK;
    if (set == NULL || cur == NULL) {
        st = TW_ERR_NOMEM;
        goto out;
    }
    if (hwloc_get_cpubind(tw_topo, cur, HWLOC_CPUBIND_THREAD) != 0) {
        hwloc_bitmap_copy(cur, hwloc_topology_get_allowed_cpuset(tw_topo));
    }
    hwloc_bitmap_and(set, obj->cpuset, cur);
    if (hwloc_bitmap_iszero(set)) {
        hwloc_bitmap_copy(set, cur);
    }
    if (hwloc_set_cpubind(tw_topo, set, HWLOC_CPUBIND_THREAD) != 0) {
        st = TW_ERR_TRANSPORT;
        goto out;
    }
    if (text != NULL && len > 0) {
        hwloc_bitmap_list_snprintf(text, len, set);
    }
out:
    hwloc_bitmap_free(cur);
    hwloc_bitmap_free(set);
    return st;
}

tw_status_t tw_topo_package_cpus(int package, char *text, size_t len)
{
    hwloc_obj_t obj;
    hwloc_bitmap_t set, cur;
    tw_status_t st = TW_OK;

    if (!tw_topo_get()) {
        return TW_ERR_TRANSPORT;
    }
    obj = hwloc_get_obj_by_type(tw_topo, HWLOC_OBJ_PACKAGE, (unsigned)package);
    if (obj == NULL && package == 0) {
        obj = hwloc_get_root_obj(tw_topo);
    }
    if (obj == NULL || obj->cpuset == NULL) {
        return TW_ERR_INVALID;
    }
    set = hwloc_bitmap_alloc();
    cur = hwloc_bitmap_alloc();
    if (set == NULL || cur == NULL) {
        st = TW_ERR_NOMEM;
        goto out;
    }
    if (hwloc_get_cpubind(tw_topo, cur, HWLOC_CPUBIND_PROCESS) != 0) {
        hwloc_bitmap_copy(cur, hwloc_topology_get_allowed_cpuset(tw_topo));
    }
    hwloc_bitmap_and(set, obj->cpuset, cur);
    hwloc_bitmap_list_snprintf(text, len, hwloc_bitmap_iszero(set) ? cur : set);
out:
    hwloc_bitmap_free(cur);
    hwloc_bitmap_free(set);
    return st;
}
