# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# src/runtime unit tests.
tw_add_test(NAME addr_blob SOURCES test_addr_blob.c LABELS unit INTERNAL TIMEOUT 60)
# The bootstrap backend chosen from the environment, and the refusals
# (test_bootstrap.c): each check logs its refusal on purpose.
tw_add_case_tests(NAME bootstrap SOURCES test_bootstrap.c INTERNAL LABELS unit TIMEOUT 60
                  CASES select init refuse variables)
tw_expect_log(bootstrap:select bootstrap:init PATTERNS
  "init. error: built without PMIx, but PMIX_NAMESPACE and PMIX_RANK say a PMIx launcher")
tw_expect_log(bootstrap:init PATTERNS
  "boot. error: rank 0: cannot reach the launcher at /nonexistent/sock: "
  "boot. error: PMIx_Init failed .[A-Z_]+. though PMIX_NAMESPACE=threadwire-test-ns is set")
tw_expect_log(bootstrap:refuse PATTERNS
  "init. error: (SLURM_STEP_NUM_TASKS|OMPI_COMM_WORLD_SIZE|PMI_SIZE)=[0-9]+ but no PMIx in the environment: "
  "init. error: PMIX_(NAMESPACE|RANK) is set but PMIX_(RANK|NAMESPACE) is not: "
  "init. error: TW_SIZE=2 but no TW_BOOT_ADDR: start the job with twrun$")
tw_expect_log(bootstrap:variables PATTERNS
  "boot. error: TW_NODE_ID='(node1|-1)': want a node number, or a list of them by rank$"
  "config. error: bad value '0' for TW_BOOT_TIMEOUT: ")
