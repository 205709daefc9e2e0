/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * mltcp_classify.h - which job a socket belongs to, and the per-flow state's
 * init and release.  Used by the sockops classifier (mltcp_rule_lookup, before
 * the module is chosen) and by every module's init() (mltcp_classify: the
 * sockops tag first, then the same rules), so both see one look-up.
 *
 * Classification (mltcp_classify, mltcp_rule_lookup): a remote address is looked up
 * once in an LPM trie of prefixes (longest prefix wins); the prefix's value lists its
 * port ranges -> job in precedence order, and the first range that holds the remote
 * port names the job.  User space (mltcp/host/rules.py) writes each prefix's list with
 * the rules of every shorter prefix that contains it, and of the any-address rules,
 * after its own (longest prefix first, then the narrowest range), so one look-up and
 * a scan of at most MLTCP_PORT_RULES entries give longest-prefix-then-narrowest-port.
 * Local (listening) port ranges are one list, tried after the remote rules.
 * tests/test_classify.py runs mltcp_rule_lookup against the Python mirror.
 */
#ifndef __MLTCP_CLASSIFY_H
#define __MLTCP_CLASSIFY_H

#include "mltcp.h"

/* The job of the first range in `r` that holds `port`, or 0. */
static __always_inline __u32 mltcp_port_match(const struct mltcp_port_rules *r, __u32 port)
{
	__u32 i, n = r->count;

	for (i = 0; i < MLTCP_PORT_RULES; i++) {
		if (i >= n)
			break;
		if (port >= r->rule[i].lo && port <= r->rule[i].hi)
			return r->rule[i].job_id;
	}
	return 0;
}

/* An IPv4-mapped IPv6 address (::ffff:a.b.c.d, a dual-stack socket talking IPv4) is
 * the IPv4 address: IPv4 rules match it. */
static __always_inline __u32 mltcp_unmap_v4(__u32 family, __u32 *addr)
{
	if (family == AF_INET6 && !addr[0] && !addr[1] && addr[2] == bpf_htonl(0xffff)) {
		addr[0] = addr[3];
		addr[1] = addr[2] = addr[3] = 0;
		return AF_INET;
	}
	return family;
}

/*
 * The job of a connection by its rules: the remote address's longest prefix, then the
 * first (narrowest) port range of that prefix's list holding the remote port; else the
 * first local-port range holding the local port.  `has_remote` is 0 for a listening
 * socket (no peer yet: only local-port rules apply).  One trie look-up and two scans
 * of at most MLTCP_PORT_RULES entries: it runs at the init of every socket.
 */
static __always_inline __u32 mltcp_rule_lookup(__u32 family, const __u32 *raddr, __u16 rport,
					       __u16 lport, int has_remote)
{
	struct mltcp_prefix_key key = {};
	struct mltcp_port_rules *r;
	__u32 zero = 0, job;

	if (has_remote && (family == AF_INET || family == AF_INET6)) {
		key.addr[0] = raddr[0];
		key.addr[1] = raddr[1];
		key.addr[2] = raddr[2];
		key.addr[3] = raddr[3];
		key.family = mltcp_unmap_v4(family, key.addr);
		key.prefixlen = key.family == AF_INET ? 64 : MLTCP_PREFIX_BITS;
		r = bpf_map_lookup_elem(&mltcp_prefix_rules, &key);
		if (r) {
			job = mltcp_port_match(r, rport);
			if (job)
				return job;
		}
	}
	r = bpf_map_lookup_elem(&mltcp_local_rules, &zero);
	if (r)
		return mltcp_port_match(r, lport);
	return 0;
}

/* Which job owns this socket: the sockops tag first, then the rules. */
static __always_inline __u32 mltcp_classify(struct sock *sk)
{
	struct mltcp_sk_tag *tag;
	__u32 raddr[4] = {};
	__u32 family = sk->__sk_common.skc_family;

	tag = bpf_sk_storage_get(&mltcp_sk_tags, sk, 0, 0);
	if (tag && tag->job_id)
		return tag->job_id;
	if (family == AF_INET) {
		raddr[0] = sk->__sk_common.skc_daddr;
	} else if (family == AF_INET6) {
		raddr[0] = sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[0];
		raddr[1] = sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[1];
		raddr[2] = sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[2];
		raddr[3] = sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[3];
	} else {
		return 0;
	}
	return mltcp_rule_lookup(family, raddr, bpf_ntohs(sk->__sk_common.skc_dport),
				 sk->__sk_common.skc_num,
				 sk->__sk_common.skc_state != TCP_LISTEN);
}

static __always_inline void mltcp_flow_init(struct sock *sk, struct mltcp_flow *fl)
{
	fl->job_id = mltcp_classify(sk);
	fl->f_fp = MLTCP_FP_ONE;
	fl->last_bytes_acked = (__u32)mltcp_tcp_sk(sk)->bytes_acked;
	/* Selected before the handshake (sockops at connect): bytes_acked will count the
	 * SYN's sequence number, which is not data. */
	if (sk->__sk_common.skc_state == TCP_SYN_SENT)
		fl->last_bytes_acked += 1;
	fl->next_report_us = 0;
	fl->frac = 0;
	fl->reducing = 0;
	fl->_pad = 0;
	fl->ssthresh = 0;
	fl->episode_seq = 0;
	fl->prr_delivered = 0;
	fl->cwnd_set = 0;
}

static __always_inline void mltcp_flow_release(struct sock *sk)
{
	__u64 key = (__u64)sk;

	bpf_map_delete_elem(&mltcp_flows, &key);
}

#endif /* __MLTCP_CLASSIFY_H */
