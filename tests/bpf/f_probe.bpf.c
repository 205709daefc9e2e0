/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * f_probe.bpf.c - runs the kernel datapath's own F (mltcp_f_fixed in kernel/mltcp_f.h)
 * on values from user space, so tests/test_kernel_abi.py can compare it with the
 * Python definition (mltcp.core.aggressiveness) case by case.  A test program only:
 * it is not part of the datapath and is never shipped.
 */
#include "mltcp.h"
#include "mltcp_f.h"

struct f_case {
	__u64 bytes;
	__u64 budget;
	__u32 slope_fp;
	__u32 intercept_fp;
	__u32 cap_fp;
	__u32 f_fp;		/* out */
};

SEC("syscall")
int mltcp_f_probe(struct f_case *c)
{
	struct mltcp_job_cfg cfg = {};

	cfg.slope_fp = c->slope_fp;
	cfg.intercept_fp = c->intercept_fp;
	cfg.cap_fp = c->cap_fp;
	c->f_fp = mltcp_f_fixed(&cfg, c->bytes, c->budget);
	return 0;
}
