/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * classify_probe.bpf.c - runs the datapath's own rule look-up (mltcp_rule_lookup in
 * kernel/mltcp_classify.h) on connections described by user space, against rule maps
 * that the test fills, so tests/test_classify.py can compare the kernel's answer with
 * the Python mirror (mltcp.host.rules.Table.lookup) case by case.  A test program
 * only: it is not part of the datapath and is never shipped.
 */
#include "mltcp.h"
#include "mltcp_classify.h"

/* A raw tracepoint program: BPF_PROG_TEST_RUN hands it the case as its arguments and
 * returns its return value (a "syscall" program would be sleepable, and sleepable
 * programs may not use the LPM trie). */
SEC("raw_tp")
int BPF_PROG(mltcp_classify_probe, __u64 family, __u64 a0, __u64 a1, __u64 a2, __u64 a3,
	     __u64 rport, __u64 lport, __u64 has_remote)
{
	__u32 addr[4];	/* network byte order, as the socket holds it */

	addr[0] = (__u32)a0;
	addr[1] = (__u32)a1;
	addr[2] = (__u32)a2;
	addr[3] = (__u32)a3;
	return (int)mltcp_rule_lookup((__u32)family, addr, (__u32)rport, (__u32)lport,
				      (__u32)has_remote);
}
