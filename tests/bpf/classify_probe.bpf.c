/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * classify_probe.bpf.c - runs the datapath's own rule look-up (mltcp_rule_lookup in
 * kernel/mltcp.h) on connections described by user space, against rule maps that the
 * test fills, so tests/test_classify.py can compare the kernel's answer with the
 * Python mirror (mltcp.host.rules.Table.lookup) case by case.  A test program only:
 * it is not part of the datapath and is never shipped.
 */
#include "mltcp.h"

struct classify_case {
	__u32 family;
	__u32 addr[4];		/* network byte order, as the socket holds it */
	__u32 rport;
	__u32 lport;
	__u32 has_remote;
	__u32 job_id;		/* out */
};

SEC("syscall")
int mltcp_classify_probe(struct classify_case *c)
{
	__u32 addr[4];

	addr[0] = c->addr[0];
	addr[1] = c->addr[1];
	addr[2] = c->addr[2];
	addr[3] = c->addr[3];
	c->job_id = mltcp_rule_lookup(c->family, addr, c->rport, c->lport, c->has_remote);
	return 0;
}
