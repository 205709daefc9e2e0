// SPDX-License-Identifier: GPL-2.0-only
/*
 * mltcp_sockops - puts a training job's sockets under MLTCP without touching
 * the training program.
 *
 * Attached to a job's cgroup (or to the root cgroup for address/port rules),
 * it runs when a socket listens, connects or is accepted.  It finds the
 * socket's job - from this attachment's cgroup storage (written by the control
 * plane right after attaching) or else from the prefix and port rules
 * (mltcp_rule_lookup, mltcp_classify.h) - tags the socket with the job id (sk storage,
 * inherited by accepted children) and selects the job's MLTCP congestion
 * control with bpf_setsockopt().  The tag is written first so that the
 * module's init() already sees it.  Sockets of no job are left alone.
 *
 * Fail-safe: when the job's config is stale (the agent is gone) or unusable
 * (disabled, another ABI), a new connection of the job gets the kernel's own
 * algorithm of the same family (reno, cubic, dctcp; dctcp only where the kernel
 * has it, else the socket keeps what it had) instead of the BPF module, and the
 * job's stale_fallbacks counts it.  Connections already running keep their
 * module, which runs them at F = 1 (mltcp_on_ack).  There is no kernel
 * counterpart to depart from.
 */
#include "mltcp.h"
#include "mltcp_classify.h"

#define SOL_TCP 6
#define TCP_CONGESTION 13

struct {
	__uint(type, BPF_MAP_TYPE_CGROUP_STORAGE);
	__type(key, struct bpf_cgroup_storage_key);
	__type(value, __u32);   /* job id of the cgroup this program is attached to, 0 = rules */
} mltcp_cgroup_job SEC(".maps");

/* The module for a job's new socket, or with ``native`` the kernel's own algorithm of
 * its family (the name without "mltcp_").  bpf_setsockopt never loads a module: without
 * tcp_dctcp the native call fails and the socket keeps its algorithm. */
static __always_inline int set_cc(struct bpf_sock_ops *skops, __u32 cc, int native)
{
	char reno[] = "mltcp_reno";
	char cubic[] = "mltcp_cubic";
	char dctcp[] = "mltcp_dctcp";
	char *name;
	int len;

	switch (cc) {
	case MLTCP_CC_RENO:
		name = reno;
		len = sizeof(reno);
		break;
	case MLTCP_CC_CUBIC:
		name = cubic;
		len = sizeof(cubic);
		break;
	case MLTCP_CC_DCTCP:
		name = dctcp;
		len = sizeof(dctcp);
		break;
	default:
		return 0;
	}
	if (native)
		return bpf_setsockopt(skops, SOL_TCP, TCP_CONGESTION, name + 6, len - 6);
	return bpf_setsockopt(skops, SOL_TCP, TCP_CONGESTION, name, len);
}

/* A job whose config cannot be used now: native CC for the new connection, counted. */
static __always_inline void fall_back(struct bpf_sock_ops *skops, __u32 job,
				      const struct mltcp_job_cfg *cfg)
{
	struct mltcp_job_state *st;

	if (!cfg->cc)
		return;   /* detached (config zeroed): not a job any more */
	set_cc(skops, cfg->cc, 1);
	st = bpf_map_lookup_elem(&mltcp_job_state, &job);
	if (st)
		__sync_fetch_and_add(&st->stale_fallbacks, 1);
}

SEC("sockops")
int mltcp_sockops(struct bpf_sock_ops *skops)
{
	struct mltcp_job_cfg *cfg;
	struct mltcp_sk_tag *tag;
	struct bpf_sock *sk;
	__u32 raddr[4] = {};
	__u32 *cg_job;
	__u32 job = 0;
	int tagged = 0;
	__u32 family, op, ip4, ip6_0, ip6_1, ip6_2, ip6_3, rport, lport;

	if (skops->op != BPF_SOCK_OPS_TCP_LISTEN_CB && skops->op != BPF_SOCK_OPS_TCP_CONNECT_CB &&
	    skops->op != BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB)
		return 1;
	/* Read every context field first, unconditionally, on one path: the verifier
	 * rejects the offset-adjusted context loads clang emits for reads on merging
	 * branches ("dereference of modified ctx ptr"). */
	family = skops->family;
	op = skops->op;
	ip4 = skops->remote_ip4;
	ip6_0 = skops->remote_ip6[0];
	ip6_1 = skops->remote_ip6[1];
	ip6_2 = skops->remote_ip6[2];
	ip6_3 = skops->remote_ip6[3];
	rport = bpf_ntohl(skops->remote_port) & 0xffff;
	lport = skops->local_port;
	sk = skops->sk;
	if (!sk)
		return 1;
	tag = bpf_sk_storage_get(&mltcp_sk_tags, sk, 0, 0);
	if (tag && tag->job_id) {
		/* Classified already (inherited from the listener, or a nested cgroup): the
		 * module is set; only a job gone stale since changes anything. */
		job = tag->job_id;
		tagged = 1;
	}
	if (!job) {
		cg_job = bpf_get_local_storage(&mltcp_cgroup_job, 0);
		if (cg_job)
			job = *cg_job;
	}
	if (!job) {
		if (family == AF_INET) {
			raddr[0] = ip4;
		} else if (family == AF_INET6) {
			raddr[0] = ip6_0;
			raddr[1] = ip6_1;
			raddr[2] = ip6_2;
			raddr[3] = ip6_3;
		} else {
			return 1;
		}
		job = mltcp_rule_lookup(family, raddr, rport, lport, op != BPF_SOCK_OPS_TCP_LISTEN_CB);
	}
	if (!job || job >= MLTCP_MAX_JOBS)
		return 1;
	cfg = bpf_map_lookup_elem(&mltcp_job_cfg, &job);
	if (!cfg)
		return 1;
	if (!mltcp_cfg_usable(cfg) || mltcp_cfg_stale(cfg, bpf_ktime_get_ns())) {
		fall_back(skops, job, cfg);
		return 1;
	}
	if (tagged)
		return 1;
	tag = bpf_sk_storage_get(&mltcp_sk_tags, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!tag)
		return 1;
	tag->job_id = job;
	set_cc(skops, cfg->cc, 0);
	return 1;
}
