/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * mltcp_health.h - the host-wide datapath health counters (struct mltcp_health
 * and its map are in mltcp.h, beside the other structs user space mirrors).
 * mltcp_window.h counts here each time the kernel fault of docs/known-issues.md
 * reached a module and was kept away from the window: an ssthresh TCP holds
 * that is not the module's, or a window above any the module allows.  Its own
 * header so that counting has one definition whichever logic detects the fault.
 */
#ifndef __MLTCP_HEALTH_H
#define __MLTCP_HEALTH_H

#include "mltcp.h"

/* which: 0 an ssthresh override, 1 a contained window; bad: the value TCP held. */
static __always_inline void mltcp_health_count(int which, __u64 bad)
{
	struct mltcp_health *h;
	__u32 zero = 0;

	h = bpf_map_lookup_elem(&mltcp_health, &zero);
	if (!h)
		return;
	if (which)
		__sync_fetch_and_add(&h->cwnd_contained, 1);
	else
		__sync_fetch_and_add(&h->ssthresh_overrides, 1);
	h->last_bad = bad;
}

#endif /* __MLTCP_HEALTH_H */
