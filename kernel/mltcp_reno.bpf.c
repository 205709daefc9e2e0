// SPDX-License-Identifier: GPL-2.0-only
/*
 * mltcp_reno - MLTCP-Reno.
 *
 * How it departs from the kernel's Reno (net/ipv4/tcp_cong.c): in congestion
 * avoidance the ACKed packet count handed to the additive increase is scaled
 * by the flow's job's F(bytes_ratio), so the window grows F segments per RTT
 * instead of one.  Slow start, ssthresh (halve on loss) and undo are the
 * kernel's own functions, called as kfuncs.  A flow that belongs to no job,
 * or whose job config is disabled or stale, has F = 1 and runs exactly the
 * kernel's tcp_reno_cong_avoid() path.  The added cwnd_event() only watches
 * CA_EVENT_TX_START for iteration boundaries, and the added set_state() only
 * runs mltcp_repair() (a kernel-fault workaround; Reno has neither callback).
 */
#include "mltcp.h"

extern void tcp_reno_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;
extern __u32 tcp_reno_ssthresh(struct sock *sk) __ksym;
extern __u32 tcp_reno_undo_cwnd(struct sock *sk) __ksym;

struct mltcp_reno_ca {
	struct mltcp_flow m;
};

static __always_inline struct mltcp_reno_ca *reno_ca(struct sock *sk)
{
	return mltcp_ca_priv(sk);
}

/* Reno's ssthresh for the window before the reduction (for mltcp_repair). */
static __always_inline __u32 reno_expected_ssthresh(struct sock *sk)
{
	__u32 half = mltcp_tcp_sk(sk)->prior_cwnd >> 1;

	return half > 2 ? half : 2;
}

SEC("struct_ops")
void BPF_PROG(mltcp_reno_init, struct sock *sk)
{
	mltcp_flow_init(sk, &reno_ca(sk)->m);
}

SEC("struct_ops")
void BPF_PROG(mltcp_reno_release, struct sock *sk)
{
	mltcp_flow_release(sk);
}

SEC("struct_ops")
void BPF_PROG(mltcp_reno_acked, struct sock *sk, const struct ack_sample *sample)
{
	mltcp_repair(sk, reno_expected_ssthresh(sk));
	mltcp_on_ack(sk, &reno_ca(sk)->m, MLTCP_CC_RENO);
}

SEC("struct_ops")
void BPF_PROG(mltcp_reno_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	mltcp_repair(sk, reno_expected_ssthresh(sk));
	tcp_reno_cong_avoid(sk, ack, mltcp_scale_acked(sk, &reno_ca(sk)->m, acked));
}

SEC("struct_ops")
__u32 BPF_PROG(mltcp_reno_ssthresh, struct sock *sk)
{
	mltcp_count_reduction(sk, &reno_ca(sk)->m, 0);
	return tcp_reno_ssthresh(sk);
}

SEC("struct_ops")
void BPF_PROG(mltcp_reno_state, struct sock *sk, __u8 new_state)
{
	mltcp_repair(sk, reno_expected_ssthresh(sk));
}

SEC("struct_ops")
void BPF_PROG(mltcp_reno_cwnd_event, struct sock *sk, enum tcp_ca_event event)
{
	if (event == CA_EVENT_TX_START)
		mltcp_on_tx_start(sk, &reno_ca(sk)->m);
}

SEC("struct_ops")
__u32 BPF_PROG(mltcp_reno_undo_cwnd, struct sock *sk)
{
	return tcp_reno_undo_cwnd(sk);
}

SEC(".struct_ops")
struct tcp_congestion_ops mltcp_reno = {
	.init = (void *)mltcp_reno_init,
	.release = (void *)mltcp_reno_release,
	.pkts_acked = (void *)mltcp_reno_acked,
	.cong_avoid = (void *)mltcp_reno_cong_avoid,
	.ssthresh = (void *)mltcp_reno_ssthresh,
	.set_state = (void *)mltcp_reno_state,
	.cwnd_event = (void *)mltcp_reno_cwnd_event,
	.undo_cwnd = (void *)mltcp_reno_undo_cwnd,
	.name = "mltcp_reno",
};
