/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * mltcp.h - state and logic shared by every MLTCP congestion module.
 *
 * MLTCP scales a flow's window growth by F(bytes_ratio), where bytes_ratio is
 * the fraction of its training job's per-iteration byte budget already acked
 * on this host.  This header holds the part that is the same for every
 * algorithm: the pinned maps (job config, job state, flow table,
 * classification rules, socket tags), flow classification, the iteration
 * tracker and the F computation.  The tracker mirrors mltcp/iteration.py
 * (on_ack, on_tx_start) exactly; change both together
 * (tests/test_kernel_behaviour.py checks them against a real sender).
 *
 * Classification (mltcp_classify, mltcp_rule_lookup): a remote address is looked up
 * once in an LPM trie of prefixes (longest prefix wins); the prefix's value lists its
 * port ranges -> job in precedence order, and the first range that holds the remote
 * port names the job.  User space (mltcp/host/rules.py) writes each prefix's list with
 * the rules of every shorter prefix that contains it, and of the any-address rules,
 * after its own (longest prefix first, then the narrowest range), so one look-up and
 * a scan of at most MLTCP_PORT_RULES entries give longest-prefix-then-narrowest-port.
 * Local (listening) port ranges are one list, tried after the remote rules.
 *
 * Layout contract with user space (mltcp/host/maps.py): MLTCP_ABI_VERSION must be
 * bumped whenever a struct below changes; the control plane refuses to talk
 * to modules built with another version (and a config written with another
 * version is ignored here, so a mismatch degrades to the standard algorithm).
 */
#ifndef __MLTCP_H
#define __MLTCP_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

char _license[] SEC("license") = "GPL";

#define MLTCP_ABI_VERSION 2
#define MLTCP_MAX_JOBS 256          /* job ids 1..255; 0 means "no job" */
#define MLTCP_MAX_FLOWS 16384
#define MLTCP_MAX_PREFIXES 1024     /* entries of the prefix trie (both families) */
#define MLTCP_PORT_RULES 32         /* port ranges per prefix, inherited ones included */
#define MLTCP_PREFIX_BITS 160       /* the trie key's data: family word + 128 address bits */
#define MLTCP_HISTORY 8              /* boundary samples kept per job (power of 2) */
#define MLTCP_FP_SHIFT 16
#define MLTCP_FP_ONE (1U << MLTCP_FP_SHIFT)
#define MLTCP_TAIL_SHIFT 4           /* a tail below budget/16 after a wrap is not a new iteration */
#define MLTCP_REPORT_NS 1000000ULL   /* flow table refresh period */

#define MLTCP_JOB_ENABLED 0x1


/* Module ids, also used by the sockops classifier to pick the CC to set. */
#define MLTCP_CC_NONE 0
#define MLTCP_CC_RENO 1
#define MLTCP_CC_CUBIC 2
#define MLTCP_CC_DCTCP 3

/* Kernel constants that are macros (so not in vmlinux.h). */
#define TCP_CONG_NEEDS_ECN 0x2
#define TCP_ECN_OK 1
#define TCP_ECN_DEMAND_CWR 4
#define AF_INET 2
#define AF_INET6 10

/* Written by the control plane; read on every ACK. */
struct mltcp_job_cfg {
	__u64 budget;        /* bytes per iteration on this host, 0 = unknown (F = 1, learning) */
	__u64 gap_ns;        /* an ACK-less gap longer than this starts a new iteration */
	__u64 refreshed_ns;  /* CLOCK_MONOTONIC of the control plane's last refresh */
	__u64 stale_ns;      /* config older than this falls back to F = 1; 0 = never */
	__u32 slope_fp;      /* Q16.16 */
	__u32 intercept_fp;  /* Q16.16 */
	__u32 cap_fp;        /* Q16.16, 0 = no cap */
	__u32 signal_seq;    /* bumped by an explicit end-of-iteration signal */
	__u32 flags;         /* MLTCP_JOB_ENABLED */
	__u32 cc;            /* MLTCP_CC_* that the sockops classifier selects */
	__u32 abi;           /* must equal MLTCP_ABI_VERSION */
	__u32 _pad;
};

/* Per job per host, shared by all of the job's connections. */
struct mltcp_job_state {
	struct bpf_spin_lock lock;
	__u32 f_fp;             /* current F, Q16.16 */
	__u64 bytes_in_iter;    /* bytes acked in the current iteration (wraps at budget) */
	__u64 bytes_since_gap;  /* bytes since the last gap/signal boundary */
	__u64 iteration;        /* completed iterations */
	__u64 last_ack_ns;
	__u64 last_iter_bytes;  /* bytes between the last two gap/signal boundaries */
	__u64 total_bytes;
	__u64 iter_start_ns;    /* first ACK of the current iteration */
	__u64 wraps;            /* boundaries by budget wrap */
	__u64 gaps;             /* boundaries by idle gap */
	__u64 signals;          /* boundaries by explicit signal */
	__u64 cwnd_reductions;  /* ssthresh() calls on the job's flows */
	__u64 stale_fallbacks;  /* new connections handed the native CC: config stale/disabled */
	__u32 signal_seen;
	__u32 hist_len;         /* valid entries in hist (<= MLTCP_HISTORY) */
	__u32 hist_head;        /* next slot to write */
	__u32 _pad;
	__u64 hist[MLTCP_HISTORY];
};

/* What `mltcp status` shows per flow; keyed by the socket's address. */
struct mltcp_flow_info {
	__u32 job_id;
	__u32 cc;
	__u32 family;
	__u16 sport;          /* host order */
	__u16 dport;          /* host order */
	__u32 saddr[4];
	__u32 daddr[4];
	__u32 cwnd;
	__u32 ssthresh;
	__u32 srtt_us;
	__u32 f_fp;
	__u64 bytes_acked;
	__u64 updated_ns;
	__u64 cwnd_reductions;
	__u64 loss_reductions;
};

/* Key of the prefix trie: prefixlen counts the family word's 32 bits plus the address
 * prefix (an IPv4 /24 is 56, an IPv6 /64 is 96, "any IPv4 address" is 32).  IPv4
 * addresses are in addr[0], network byte order, as the kernel keeps them. */
struct mltcp_prefix_key {
	__u32 prefixlen;
	__u32 family;         /* AF_INET / AF_INET6 */
	__u32 addr[4];
};

/* One port range -> job; a rule without a port has lo 0, hi 65535. */
struct mltcp_port_rule {
	__u16 lo;             /* host order */
	__u16 hi;             /* host order, inclusive */
	__u32 job_id;
};

/* The port ranges of a prefix (or the local-port rules) in precedence order. */
struct mltcp_port_rules {
	__u32 count;          /* valid entries of rule[] */
	__u32 _pad;
	struct mltcp_port_rule rule[MLTCP_PORT_RULES];
};

/* Tag that the sockops classifier puts on a job's socket. */
struct mltcp_sk_tag {
	__u32 job_id;
};

/*
 * Per-flow state kept in the CC's private area, after the algorithm's own.
 * icsk_ca_priv is 104 bytes and MLTCP-CUBIC fills it to the byte: keep this small
 * (the ACK counter and the report clock are 32-bit, wrap-safe differences).
 */
struct mltcp_flow {
	__u32 job_id;
	__u32 f_fp;
	__u32 last_bytes_acked;  /* low 32 bits of tp->bytes_acked at the previous ACK */
	__u32 next_report_us;    /* (ktime >> 10) of the next flow-table refresh */
	__u16 frac;              /* fractional scaled ACK carried to the next ACK (Q16) */
	__u8 reducing;           /* the previous ACK found a reduction in progress: 1 CWR, 2 Recovery */
	__u8 _pad;
	/* The window reduction this module decided (see mltcp_control_begin). */
	__u32 ssthresh;          /* its ssthresh for the current episode */
	__u32 episode_seq;       /* tp->high_seq of that episode */
	__u32 prr_delivered;     /* PRR: packets delivered since the episode began */
	__u32 cwnd_set;          /* the window it left on the previous ACK; 0 = none yet */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MLTCP_MAX_JOBS);
	__type(key, __u32);
	__type(value, struct mltcp_job_cfg);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} mltcp_job_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MLTCP_MAX_JOBS);
	__type(key, __u32);
	__type(value, struct mltcp_job_state);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} mltcp_job_state SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MLTCP_MAX_FLOWS);
	__type(key, __u64);
	__type(value, struct mltcp_flow_info);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} mltcp_flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, MLTCP_MAX_PREFIXES);
	__type(key, struct mltcp_prefix_key);
	__type(value, struct mltcp_port_rules);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} mltcp_prefix_rules SEC(".maps");

/* The local (listening) port rules: one entry. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct mltcp_port_rules);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} mltcp_local_rules SEC(".maps");

/* Host-wide datapath health counters (one entry): how often the kernel fault of
 * mltcp_control_begin() reached a module, and was kept away from the window. */
struct mltcp_health {
	__u64 ssthresh_overrides; /* TCP held another ssthresh than the module decided */
	__u64 cwnd_contained;     /* TCP held a window above any the module allows */
	__u64 last_bad;           /* the last such value */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct mltcp_health);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} mltcp_health SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC | BPF_F_CLONE); /* children of a tagged listener inherit its job */
	__type(key, int);
	__type(value, struct mltcp_sk_tag);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} mltcp_sk_tags SEC(".maps");

static __always_inline struct tcp_sock *mltcp_tcp_sk(struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline struct inet_connection_sock *mltcp_icsk(struct sock *sk)
{
	return (struct inet_connection_sock *)sk;
}

static __always_inline void *mltcp_ca_priv(struct sock *sk)
{
	return (void *)mltcp_icsk(sk)->icsk_ca_priv;
}

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

/*
 * The window is the module's own: every module sets TCP's window through
 * cong_control() instead of cong_avoid(), the reduction (PRR, RFC 6937) included.
 *
 * Why.  On Linux 6.18 (docs/known-issues.md) the u32 a struct_ops op returns -
 * ssthresh() when a reduction begins, undo_cwnd() on an undo - sometimes reaches
 * TCP as a stale stack word instead (e.g. 0x822034e5, the low half of a return-thunk
 * address), and whole invocations of an op can be lost when the programs nest on one
 * CPU.  With cong_avoid(), TCP's own PRR turns a garbage ssthresh into a window of
 * hundreds of millions of segments and bursts on the very ACK that brought it;
 * repairing it from the next callback is too late.  With cong_control(), TCP's PRR
 * and growth are bypassed and this code, which runs on every ACK after TCP's
 * loss/ECN/undo processing and before anything is sent, decides the window from the
 * module's own state:
 *  - the reduction's ssthresh is the one the module computed (recorded by its
 *    ssthresh() op, or computed here from prior_cwnd when that invocation was lost),
 *    written back over whatever TCP holds, and PRR runs on it;
 *  - at the end of a reduction the window is set to that ssthresh, as TCP does for
 *    cong_avoid() CCs (TCP leaves it to cong_control() ones);
 *  - TCP may lower the window (RTO, idle restart, MTU probing) but raises it only
 *    by an undo, whose value this module defines:
 *    at most the larger of the window before the reduction (prior_cwnd) and the one
 *    it set itself.  A window above that did not come from TCP's logic and is capped.
 * Both are counted in mltcp_health.  With F = 1 the result equals the kernel's own
 * cong_avoid path (tcp_cong_control(): PRR, tcp_may_raise_cwnd, pacing rate).
 */

/* TCP's ACK flags (net/ipv4/tcp_input.c: macros, so not in vmlinux.h). */
#define MLTCP_FLAG_DATA_ACKED 0x04
#define MLTCP_FLAG_SYN_ACKED 0x10
#define MLTCP_FLAG_DATA_SACKED 0x20
#define MLTCP_FLAG_SND_UNA_ADVANCED 0x400
#define MLTCP_FLAG_FORWARD_PROGRESS \
	(MLTCP_FLAG_DATA_ACKED | MLTCP_FLAG_SYN_ACKED | MLTCP_FLAG_DATA_SACKED)
#define MLTCP_USEC_PER_SEC 1000000ULL

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

/* Called by a module's ssthresh() op with the value it returns: the reduction that
 * begins now (TCP set high_seq = snd_nxt for CWR/Recovery and sets it to snd_nxt right
 * after for Loss) is the module's. */
static __always_inline __u32 mltcp_note_ssthresh(struct sock *sk, struct mltcp_flow *fl,
						 __u32 ssthresh)
{
	fl->ssthresh = ssthresh;
	fl->episode_seq = mltcp_tcp_sk(sk)->snd_nxt;
	fl->prr_delivered = 0;
	return ssthresh;
}

static __always_inline __u32 mltcp_in_flight(const struct tcp_sock *tp)
{
	return tp->packets_out - (tp->sacked_out + tp->lost_out) + tp->retrans_out;
}

/* Hold TCP's window to at most what this module last set, or the window before the
 * current reduction (what a genuine undo_cwnd() restores): a larger one came from a
 * garbage undo_cwnd() return (docs/known-issues.md). */
static __always_inline void mltcp_contain_cwnd(struct sock *sk, struct mltcp_flow *fl)
{
	struct tcp_sock *tp = mltcp_tcp_sk(sk);
	__u32 bound;

	if (!fl->cwnd_set)
		return;
	bound = fl->cwnd_set > tp->prior_cwnd ? fl->cwnd_set : tp->prior_cwnd;
	if (tp->snd_cwnd > bound) {
		mltcp_health_count(1, tp->snd_cwnd);
		tp->snd_cwnd = bound;
	}
}

/* set_state(): TCP returns to Open after an undo (tcp_try_undo_recovery(), a D-SACK
 * undo then tcp_try_to_open()) on ACKs that may never reach cong_control() (the
 * old-ACK path of tcp_ack() transmits right after): contain a garbage undo_cwnd()
 * window here, before that transmission. */
static __always_inline void mltcp_on_set_state(struct sock *sk, struct mltcp_flow *fl,
					       __u8 new_state)
{
	if (new_state == TCP_CA_Open)
		mltcp_contain_cwnd(sk, fl);
}

/* min_tso_segs(): tcp_write_xmit() asks it (tcp_tso_segs()) before it reads the window,
 * on every path that transmits: an ACK's, including the old-ACK path that undoes a
 * reduction on a D-SACK without calling cong_control() or set_state() (the state stays
 * Open), the application's send, the small-queue tasklet's.  The last point where a
 * garbage undo_cwnd() window can be contained before it is sent under.  Returns what
 * TCP uses without the op: net.ipv4.tcp_min_tso_segs. */
static __always_inline __u32 mltcp_on_xmit(struct sock *sk, struct mltcp_flow *fl)
{
	mltcp_contain_cwnd(sk, fl);
	return sk->__sk_common.skc_net.net->ipv4.sysctl_tcp_min_tso_segs;
}

/*
 * First part of every module's cong_control(): keep TCP's window and ssthresh to
 * the module's decisions.  ``fallback_ssthresh`` is the algorithm's ssthresh for a
 * window of prior_cwnd, used when the ssthresh() invocation of this reduction was
 * lost.  Returns 1 while a reduction (CWR, Recovery) is in progress: the caller then
 * runs mltcp_prr() instead of growing the window.
 */
static __always_inline int mltcp_control_begin(struct sock *sk, struct mltcp_flow *fl,
					       __u32 fallback_ssthresh)
{
	struct tcp_sock *tp = mltcp_tcp_sk(sk);
	__u8 state = mltcp_icsk(sk)->icsk_ca_state;
	__u32 bound;

	mltcp_contain_cwnd(sk, fl);
	if (state < TCP_CA_CWR) {
		/* The reduction ended on this ACK.  TCP leaves the window to a cong_control()
		 * CC (tcp_end_cwnd_reduction()); set it as TCP does for the others: to the
		 * ssthresh after CWR, or after Recovery unless it was undone. */
		if (fl->reducing && fl->ssthresh &&
		    (fl->reducing == 1 || tp->undo_marker)) {
			tp->snd_cwnd = fl->ssthresh;
			tp->snd_cwnd_stamp = (__u32)bpf_jiffies64();
		}
		fl->reducing = 0;
		return 0;
	}
	fl->reducing = state == TCP_CA_CWR ? 1 : state == TCP_CA_Recovery ? 2 : 0;
	if (fl->episode_seq != tp->high_seq) {
		/* Not recorded by ssthresh(): for Loss, TCP moves high_seq after the call; or
		 * the invocation was lost.  TCP's value is the module's if it could be one (no
		 * algorithm here sets ssthresh above the window it reduces from). */
		bound = tp->prior_cwnd > 2 ? tp->prior_cwnd : 2;
		fl->ssthresh = tp->snd_ssthresh <= bound ? tp->snd_ssthresh : fallback_ssthresh;
		fl->episode_seq = tp->high_seq;
		fl->prr_delivered = 0;
	}
	if (tp->snd_ssthresh != fl->ssthresh) {
		mltcp_health_count(0, tp->snd_ssthresh);
		tp->snd_ssthresh = fl->ssthresh;
	}
	return state == TCP_CA_CWR || state == TCP_CA_Recovery;
}

/* Proportional rate reduction (RFC 6937) toward the module's ssthresh, as the
 * kernel's tcp_cwnd_reduction() does toward tp->snd_ssthresh; prr_delivered is kept
 * here (TCP's field is not writable from BPF, and TCP only updates it in its own PRR). */
static __always_inline void mltcp_prr(struct sock *sk, struct mltcp_flow *fl,
				      const struct rate_sample *rs, int flag)
{
	struct tcp_sock *tp = mltcp_tcp_sk(sk);
	int newly = (int)rs->acked_sacked;
	__u32 in_flight = mltcp_in_flight(tp);
	int delta = (int)fl->ssthresh - (int)in_flight;
	int sndcnt;

	if (newly <= 0 || !tp->prior_cwnd)
		return;
	fl->prr_delivered += newly;
	if (delta < 0) {
		__u64 dividend = (__u64)fl->ssthresh * fl->prr_delivered + tp->prior_cwnd - 1;

		sndcnt = (int)(dividend / tp->prior_cwnd) - (int)tp->prr_out;
	} else {
		sndcnt = (int)fl->prr_delivered - (int)tp->prr_out;
		if (sndcnt < newly)
			sndcnt = newly;
		if ((flag & MLTCP_FLAG_SND_UNA_ADVANCED) && !rs->losses)
			sndcnt++;
		if (sndcnt > delta)
			sndcnt = delta;
	}
	if (sndcnt < 0 || (!tp->prr_out && sndcnt < 1))  /* fast retransmit on entry */
		sndcnt = tp->prr_out ? 0 : 1;
	tp->snd_cwnd = in_flight + sndcnt;
}

/* tcp_may_raise_cwnd(): grow on in-order delivery, or on any progress once the path
 * is known to reorder. */
static __always_inline int mltcp_may_raise(struct sock *sk, int flag)
{
	int reordering = sk->__sk_common.skc_net.net->ipv4.sysctl_tcp_reordering;

	if (mltcp_tcp_sk(sk)->reordering > (__u32)reordering)
		return flag & MLTCP_FLAG_FORWARD_PROGRESS;
	return flag & MLTCP_FLAG_DATA_ACKED;
}

/* Last part of every module's cong_control(): remember the window it leaves and set
 * the pacing rate as tcp_update_pacing_rate() would (TCP skips it for cong_control). */
static __always_inline void mltcp_control_end(struct sock *sk, struct mltcp_flow *fl, int grew)
{
	struct tcp_sock *tp = mltcp_tcp_sk(sk);
	struct net *net = sk->__sk_common.skc_net.net;
	__u32 cwnd = tp->snd_cwnd;
	__u64 rate;

	if (grew)
		tp->snd_cwnd_stamp = (__u32)bpf_jiffies64();
	fl->cwnd_set = cwnd;
	rate = (__u64)tp->mss_cache * ((MLTCP_USEC_PER_SEC / 100) << 3);
	if (cwnd < tp->snd_ssthresh / 2)
		rate *= net->ipv4.sysctl_tcp_pacing_ss_ratio;
	else
		rate *= net->ipv4.sysctl_tcp_pacing_ca_ratio;
	rate *= cwnd > tp->packets_out ? cwnd : tp->packets_out;
	if (tp->srtt_us)
		rate /= tp->srtt_us;
	sk->sk_pacing_rate = rate < sk->sk_max_pacing_rate ? rate : sk->sk_max_pacing_rate;
}

/* F = intercept + slope * min(bytes/budget, 1), optionally capped; Q16.16. */
static __always_inline __u32 mltcp_f_fixed(const struct mltcp_job_cfg *cfg, __u64 bytes,
					   __u64 budget)
{
	__u64 ratio, f;

	if (!budget)
		return MLTCP_FP_ONE;
	ratio = (bytes << MLTCP_FP_SHIFT) / budget;
	if (ratio > MLTCP_FP_ONE)
		ratio = MLTCP_FP_ONE;
	f = cfg->intercept_fp + (((__u64)cfg->slope_fp * ratio) >> MLTCP_FP_SHIFT);
	if (cfg->cap_fp && f > cfg->cap_fp)
		f = cfg->cap_fp;
	return (__u32)f;
}

static __always_inline int mltcp_cfg_usable(const struct mltcp_job_cfg *cfg)
{
	return (cfg->flags & MLTCP_JOB_ENABLED) && cfg->abi == MLTCP_ABI_VERSION;
}

/* The control plane has not refreshed the config for longer than its stale_ns (the
 * agent is gone): the job's flows run F = 1 and its new connections the native CC. */
static __always_inline int mltcp_cfg_stale(const struct mltcp_job_cfg *cfg, __u64 now)
{
	return cfg->stale_ns && (__s64)(now - cfg->refreshed_ns) > (__s64)cfg->stale_ns;
}

/* End the current iteration (idle gap or explicit signal); called under st->lock. */
static __always_inline void mltcp_boundary(struct mltcp_job_state *st, __u64 tail)
{
	if (st->bytes_since_gap) {
		st->hist[st->hist_head & (MLTCP_HISTORY - 1)] = st->bytes_since_gap;
		st->hist_head = (st->hist_head + 1) & (MLTCP_HISTORY - 1);
		if (st->hist_len < MLTCP_HISTORY)
			st->hist_len++;
		st->last_iter_bytes = st->bytes_since_gap;
	}
	/* A tail up to budget/16 after a wrap belongs to the iteration already counted. */
	if (st->bytes_in_iter > tail)
		st->iteration++;
	st->bytes_in_iter = 0;
	st->bytes_since_gap = 0;
}

/*
 * CA_EVENT_TX_START: a connection sends after having nothing in flight.  With
 * nothing outstanding at all (packets_out == 0; an RTO retransmission has
 * packets out) and either an end-of-iteration signal pending or the job silent
 * for longer than gap_ns (it was computing), that ends its iteration.  The
 * restart counts as activity, so the job's other connections starting a moment
 * later add no boundary.
 */
static __always_inline void mltcp_on_tx_start(struct sock *sk, struct mltcp_flow *fl)
{
	struct mltcp_job_state *st;
	struct mltcp_job_cfg *cfg;
	__u32 job = fl->job_id;
	__u64 now;

	/* An ACK that found nothing in flight never reaches cong_control(), yet it can
	 * undo a reduction (a D-SACK): contain that window before the first segment of
	 * the restart is followed by a burst. */
	mltcp_contain_cwnd(sk, fl);
	if (!job || job >= MLTCP_MAX_JOBS || mltcp_tcp_sk(sk)->packets_out)
		return;
	cfg = bpf_map_lookup_elem(&mltcp_job_cfg, &job);
	st = bpf_map_lookup_elem(&mltcp_job_state, &job);
	if (!cfg || !st || !mltcp_cfg_usable(cfg))
		return;
	now = bpf_ktime_get_ns();
	bpf_spin_lock(&st->lock);
	if (cfg->signal_seq != st->signal_seen) {
		/* The training loop signalled the end of an iteration: it takes effect here,
		 * at the next restart, when this connection's bytes are all acknowledged;
		 * taken at the next ACK it cut off the iteration's trailing ACKs. */
		st->signal_seen = cfg->signal_seq;
		st->signals++;
		mltcp_boundary(st, cfg->budget >> MLTCP_TAIL_SHIFT);
		st->f_fp = mltcp_f_fixed(cfg, 0, cfg->budget);
	} else if (st->last_ack_ns && now - st->last_ack_ns > cfg->gap_ns) {
		st->gaps++;
		mltcp_boundary(st, cfg->budget >> MLTCP_TAIL_SHIFT);
		st->f_fp = mltcp_f_fixed(cfg, 0, cfg->budget);
	}
	st->last_ack_ns = now;
	bpf_spin_unlock(&st->lock);
}

/*
 * Account the bytes this ACK delivered to the flow's job and return the job's
 * F.  Called from pkts_acked(), i.e. on every ACK that acks data, also during
 * recovery, so iteration boundaries never lag behind the wire.
 */
static __always_inline __u32 mltcp_on_ack(struct sock *sk, struct mltcp_flow *fl, __u32 cc)
{
	struct tcp_sock *tp = mltcp_tcp_sk(sk);
	struct mltcp_job_state *st;
	struct mltcp_job_cfg *cfg;
	__u64 acked = tp->bytes_acked;
	__u64 delta = (__u32)((__u32)acked - fl->last_bytes_acked);
	__u32 job = fl->job_id;
	__u64 now, budget;
	int stale;
	__u32 f;

	fl->last_bytes_acked = (__u32)acked;
	if (!job || job >= MLTCP_MAX_JOBS) {
		fl->f_fp = MLTCP_FP_ONE;
		return MLTCP_FP_ONE;
	}
	cfg = bpf_map_lookup_elem(&mltcp_job_cfg, &job);
	st = bpf_map_lookup_elem(&mltcp_job_state, &job);
	if (!cfg || !st || !mltcp_cfg_usable(cfg)) {
		fl->f_fp = MLTCP_FP_ONE;
		return MLTCP_FP_ONE;
	}
	now = bpf_ktime_get_ns();
	stale = mltcp_cfg_stale(cfg, now);
	if (!delta) {
		f = stale ? MLTCP_FP_ONE : st->f_fp;
		goto out;
	}
	budget = cfg->budget;

	bpf_spin_lock(&st->lock);
	if (!st->bytes_in_iter)
		st->iter_start_ns = now;
	st->bytes_in_iter += delta;
	st->bytes_since_gap += delta;
	st->total_bytes += delta;
	if (budget && st->bytes_in_iter >= budget) {
		st->iteration++;
		st->wraps++;
		st->bytes_in_iter -= budget;
		if (st->bytes_in_iter >= budget)
			st->bytes_in_iter = 0;
		st->iter_start_ns = now;
	}
	st->last_ack_ns = now;
	f = stale ? MLTCP_FP_ONE : mltcp_f_fixed(cfg, st->bytes_in_iter, budget);
	st->f_fp = f;
	bpf_spin_unlock(&st->lock);
out:
	fl->f_fp = f;
	if (!fl->next_report_us || (__s32)((__u32)(now >> 10) - fl->next_report_us) >= 0) {
		struct mltcp_flow_info *info;
		__u64 key = (__u64)sk;

		fl->next_report_us = (__u32)((now + MLTCP_REPORT_NS) >> 10) | 1;
		info = bpf_map_lookup_elem(&mltcp_flows, &key);
		if (!info) {
			struct mltcp_flow_info init = {};

			init.job_id = job;
			init.cc = cc;
			init.family = sk->__sk_common.skc_family;
			init.sport = sk->__sk_common.skc_num;
			init.dport = bpf_ntohs(sk->__sk_common.skc_dport);
			if (init.family == AF_INET) {
				init.saddr[0] = sk->__sk_common.skc_rcv_saddr;
				init.daddr[0] = sk->__sk_common.skc_daddr;
			} else {
				init.saddr[0] = sk->__sk_common.skc_v6_rcv_saddr.in6_u.u6_addr32[0];
				init.saddr[1] = sk->__sk_common.skc_v6_rcv_saddr.in6_u.u6_addr32[1];
				init.saddr[2] = sk->__sk_common.skc_v6_rcv_saddr.in6_u.u6_addr32[2];
				init.saddr[3] = sk->__sk_common.skc_v6_rcv_saddr.in6_u.u6_addr32[3];
				init.daddr[0] = sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[0];
				init.daddr[1] = sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[1];
				init.daddr[2] = sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[2];
				init.daddr[3] = sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[3];
			}
			bpf_map_update_elem(&mltcp_flows, &key, &init, BPF_NOEXIST);
			info = bpf_map_lookup_elem(&mltcp_flows, &key);
		}
		if (info) {
			info->cwnd = tp->snd_cwnd;
			info->ssthresh = tp->snd_ssthresh;
			info->srtt_us = tp->srtt_us >> 3;
			info->f_fp = f;
			info->bytes_acked = acked;
			info->updated_ns = now;
		}
	}
	return f;
}

/* Count a window reduction (ssthresh() call) for the flow and its job. */
static __always_inline void mltcp_count_reduction(struct sock *sk, struct mltcp_flow *fl,
						  int is_loss)
{
	struct mltcp_flow_info *info;
	struct mltcp_job_state *st;
	__u64 key = (__u64)sk;
	__u32 job = fl->job_id;

	if (!job || job >= MLTCP_MAX_JOBS)
		return;
	info = bpf_map_lookup_elem(&mltcp_flows, &key);
	if (info) {
		if (is_loss)
			__sync_fetch_and_add(&info->loss_reductions, 1);
		else
			__sync_fetch_and_add(&info->cwnd_reductions, 1);
	}
	st = bpf_map_lookup_elem(&mltcp_job_state, &job);
	if (st && !is_loss)
		__sync_fetch_and_add(&st->cwnd_reductions, 1);
}

/*
 * Scale the packets an ACK acknowledged by F, carrying the fraction, so that
 * congestion avoidance grows F times faster.  Slow start is left alone: the
 * design scales the additive (or cubic) increase only.
 */
static __always_inline __u32 mltcp_scale_acked(struct sock *sk, struct mltcp_flow *fl,
					       __u32 acked)
{
	struct tcp_sock *tp = mltcp_tcp_sk(sk);
	__u64 scaled;

	if (fl->f_fp == MLTCP_FP_ONE || tp->snd_cwnd < tp->snd_ssthresh)
		return acked;
	scaled = (__u64)acked * fl->f_fp + fl->frac;
	fl->frac = (__u16)(scaled & (MLTCP_FP_ONE - 1));
	return (__u32)(scaled >> MLTCP_FP_SHIFT);
}

#endif /* __MLTCP_H */
