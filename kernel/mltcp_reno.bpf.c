// SPDX-License-Identifier: GPL-2.0-only
/*
 * mltcp_reno - MLTCP-Reno.
 *
 * How it departs from the kernel's Reno (net/ipv4/tcp_cong.c): in congestion
 * avoidance the ACKed packet count handed to the additive increase is scaled
 * by the flow's job's F(bytes_ratio), so the window grows F segments per RTT
 * instead of one.  Slow start, ssthresh (halve on loss) and undo are the
 * kernel's own functions, called as kfuncs.  The window is set from
 * cong_control() (mltcp_window.h: mltcp_control_begin), not cong_avoid(): the
 * reduction (PRR) runs on the ssthresh this module decided, so a garbage
 * ssthresh()/undo_cwnd() return (a kernel fault, docs/known-issues.md) never
 * becomes the window; with F = 1 the window follows the kernel's Reno exactly.
 * A flow that belongs to no job, or whose job config is disabled or stale, has
 * F = 1.  The added cwnd_event() watches CA_EVENT_TX_START for iteration
 * boundaries, and it, the added set_state() and min_tso_segs() (asked before
 * every transmission) contain a garbage undo window on the paths that skip
 * cong_control().
 */
#include "mltcp.h"
#include "mltcp_classify.h"
#include "mltcp_window.h"
#include "mltcp_f.h"

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

/* Reno's ssthresh for the window before the reduction. */
static __always_inline __u32 reno_ssthresh_of(struct sock *sk)
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
	mltcp_on_ack(sk, &reno_ca(sk)->m, MLTCP_CC_RENO);
}

SEC("struct_ops")
void BPF_PROG(mltcp_reno_cong_control, struct sock *sk, __u32 ack, int flag,
	      const struct rate_sample *rs)
{
	struct mltcp_reno_ca *ca = reno_ca(sk);
	int grew = 0;

	if (mltcp_control_begin(sk, &ca->m, reno_ssthresh_of(sk))) {
		mltcp_prr(sk, &ca->m, rs, flag);
	} else if (mltcp_may_raise(sk, flag)) {
		tcp_reno_cong_avoid(sk, ack, mltcp_scale_acked(sk, &ca->m, rs->acked_sacked));
		grew = 1;
	}
	mltcp_control_end(sk, &ca->m, grew);
}

SEC("struct_ops")
__u32 BPF_PROG(mltcp_reno_ssthresh, struct sock *sk)
{
	struct mltcp_reno_ca *ca = reno_ca(sk);

	mltcp_count_reduction(sk, &ca->m, 0);
	return mltcp_note_ssthresh(sk, &ca->m, tcp_reno_ssthresh(sk));
}

SEC("struct_ops")
void BPF_PROG(mltcp_reno_cwnd_event, struct sock *sk, enum tcp_ca_event event)
{
	if (event == CA_EVENT_TX_START)
		mltcp_on_tx_start(sk, &reno_ca(sk)->m);
}

SEC("struct_ops")
void BPF_PROG(mltcp_reno_state, struct sock *sk, __u8 new_state)
{
	mltcp_on_set_state(sk, &reno_ca(sk)->m, new_state);
}

SEC("struct_ops")
__u32 BPF_PROG(mltcp_reno_undo_cwnd, struct sock *sk)
{
	return tcp_reno_undo_cwnd(sk);
}

SEC("struct_ops")
__u32 BPF_PROG(mltcp_reno_min_tso_segs, struct sock *sk)
{
	return mltcp_on_xmit(sk, &reno_ca(sk)->m);
}

SEC(".struct_ops")
struct tcp_congestion_ops mltcp_reno = {
	.init = (void *)mltcp_reno_init,
	.release = (void *)mltcp_reno_release,
	.pkts_acked = (void *)mltcp_reno_acked,
	.cong_control = (void *)mltcp_reno_cong_control,
	.ssthresh = (void *)mltcp_reno_ssthresh,
	.set_state = (void *)mltcp_reno_state,
	.cwnd_event = (void *)mltcp_reno_cwnd_event,
	.min_tso_segs = (void *)mltcp_reno_min_tso_segs,
	.undo_cwnd = (void *)mltcp_reno_undo_cwnd,
	.name = "mltcp_reno",
};
