/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * mltcp.h - the ABI and the maps shared by every MLTCP eBPF object.
 *
 * MLTCP scales a flow's window growth by F(bytes_ratio), where bytes_ratio is
 * the fraction of its training job's per-iteration byte budget already acked
 * on this host.  This header holds what user space and every object agree on:
 * the limits, the structs the control plane mirrors, the pinned maps (job
 * config, job state, flow table, classification rules, health counters, socket
 * tags), the per-flow state every module keeps in its private area, and the
 * accessors of the socket and of the job config.  The maps are defined here, so
 * every object that includes this header has all of them (the loader pins them
 * by name and reuses the pinned ones).  The logic is in one header per concern,
 * each included by the objects that use it:
 *  - mltcp_classify.h: which job a socket belongs to (sockops tag, prefix and
 *    port rules), and the per-flow state's init and release;
 *  - mltcp_window.h: the window set from cong_control() (the module's own
 *    reduction and PRR, the containment of the kernel fault);
 *  - mltcp_health.h: the host-wide counters of that fault;
 *  - mltcp_f.h: F, the iteration tracker and the flow/job accounting.
 *
 * Layout contract with user space (mltcp/host/maps.py): MLTCP_ABI_VERSION must be
 * bumped whenever a struct below changes; the control plane refuses to talk
 * to modules built with another version (and a config written with another
 * version is ignored here, so a mismatch degrades to the standard algorithm).
 * tests/test_kernel_abi.py and tests/test_classify.py read the limits below from
 * this file and the structs from the objects' BTF.
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
/* The training loop signals the job's iteration ends (mltcp.hook): boundaries come from
 * the signal, the budget wrap stays as a safety net, and idle gaps are no boundary (a
 * pause over the gap inside an all-reduce would split the iteration). */
#define MLTCP_JOB_SIGNALS 0x2


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
	__u32 flags;         /* MLTCP_JOB_ENABLED, MLTCP_JOB_SIGNALS */
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

/* Host-wide datapath health counters (one entry): how often the kernel fault that
 * mltcp_control_begin() (mltcp_window.h) contains reached a module, and was kept away
 * from the window; counted by mltcp_health.h. */
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

/* A config the modules may use: enabled, and written for this ABI (another version is
 * ignored, so a mismatch degrades to the standard algorithm). */
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

#endif /* __MLTCP_H */
