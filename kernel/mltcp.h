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

/* Sanity bounds for the window repair (see mltcp_repair): a real window is far below
 * 2^20 segments (1.4 GB in flight; 400 Gbit/s x 1 ms is 34k segments). */
#define MLTCP_SANE_WINDOW (1U << 20)
#define TCP_INFINITE_SSTHRESH 0x7fffffff

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

/* Per-flow state kept in the CC's private area, after the algorithm's own. */
struct mltcp_flow {
	__u32 job_id;
	__u32 f_fp;
	__u64 last_bytes_acked;
	__u64 next_report_ns;
	__u32 frac;           /* fractional scaled ACK carried to the next ACK (Q16) */
	__u32 flags;
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

/* Host-wide datapath health counters (one entry). */
struct mltcp_health {
	__u64 ssthresh_repairs;  /* garbage ssthresh handed back to TCP, replaced */
	__u64 cwnd_repairs;      /* garbage cwnd found, replaced */
	__u64 last_bad;          /* the last garbage value seen */
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
	fl->last_bytes_acked = mltcp_tcp_sk(sk)->bytes_acked;
	/* Selected before the handshake (sockops at connect): bytes_acked will count the
	 * SYN's sequence number, which is not data. */
	if (sk->__sk_common.skc_state == TCP_SYN_SENT)
		fl->last_bytes_acked += 1;
	fl->next_report_ns = 0;
	fl->frac = 0;
	fl->flags = 0;
}

static __always_inline void mltcp_flow_release(struct sock *sk)
{
	__u64 key = (__u64)sk;

	bpf_map_delete_elem(&mltcp_flows, &key);
}

/*
 * Work around a kernel fault seen on Linux 6.18 (docs/known-issues.md): now and then
 * the u32 that a BPF struct_ops ssthresh()/undo_cwnd() returns reaches TCP as a stale
 * stack word (0x81104110, the low half of an address in the SRSO return thunk), and
 * PRR then turns it into a window of millions of segments.  Any BPF congestion control
 * is hit, native ones are not.  Called from set_state() (which TCP runs right after
 * ssthresh() and before PRR uses it) and on every ACK: an ssthresh or cwnd beyond any
 * real window is replaced by what the algorithm would have set, computed from the
 * window before the reduction (prior_cwnd, maintained by TCP itself).
 */
static __always_inline void mltcp_repair(struct sock *sk, __u32 expected_ssthresh)
{
	struct tcp_sock *tp = mltcp_tcp_sk(sk);
	struct mltcp_health *h;
	__u32 zero = 0, bad = 0, fixed = 0;

	if (tp->snd_ssthresh != TCP_INFINITE_SSTHRESH && tp->snd_ssthresh > MLTCP_SANE_WINDOW) {
		bad = tp->snd_ssthresh;
		tp->snd_ssthresh = expected_ssthresh;
		fixed = 1;
	}
	if (tp->snd_cwnd > MLTCP_SANE_WINDOW) {
		bad = tp->snd_cwnd;
		tp->snd_cwnd = tp->snd_ssthresh < MLTCP_SANE_WINDOW ? tp->snd_ssthresh : 10;
		fixed |= 2;
	}
	if (!fixed)
		return;
	h = bpf_map_lookup_elem(&mltcp_health, &zero);
	if (!h)
		return;
	if (fixed & 1)
		__sync_fetch_and_add(&h->ssthresh_repairs, 1);
	if (fixed & 2)
		__sync_fetch_and_add(&h->cwnd_repairs, 1);
	h->last_bad = bad;
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
 * packets out) and the job silent for longer than gap_ns, the job was
 * computing: that ends its iteration.  The restart counts as activity, so the
 * job's other connections starting a moment later add no boundary.
 */
static __always_inline void mltcp_on_tx_start(struct sock *sk, struct mltcp_flow *fl)
{
	struct mltcp_job_state *st;
	struct mltcp_job_cfg *cfg;
	__u32 job = fl->job_id;
	__u64 now;

	if (!job || job >= MLTCP_MAX_JOBS || mltcp_tcp_sk(sk)->packets_out)
		return;
	cfg = bpf_map_lookup_elem(&mltcp_job_cfg, &job);
	st = bpf_map_lookup_elem(&mltcp_job_state, &job);
	if (!cfg || !st || !mltcp_cfg_usable(cfg))
		return;
	now = bpf_ktime_get_ns();
	bpf_spin_lock(&st->lock);
	if (st->last_ack_ns && now - st->last_ack_ns > cfg->gap_ns) {
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
	__u64 delta = acked - fl->last_bytes_acked;
	__u32 job = fl->job_id;
	__u64 now, budget, tail;
	int stale;
	__u32 f;

	fl->last_bytes_acked = acked;
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
	tail = budget >> MLTCP_TAIL_SHIFT;

	bpf_spin_lock(&st->lock);
	if (cfg->signal_seq != st->signal_seen) {
		st->signal_seen = cfg->signal_seq;
		st->signals++;
		mltcp_boundary(st, tail);
	}
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
	if (now >= fl->next_report_ns) {
		struct mltcp_flow_info *info;
		__u64 key = (__u64)sk;

		fl->next_report_ns = now + MLTCP_REPORT_NS;
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
	fl->frac = scaled & (MLTCP_FP_ONE - 1);
	return (__u32)(scaled >> MLTCP_FP_SHIFT);
}

#endif /* __MLTCP_H */
