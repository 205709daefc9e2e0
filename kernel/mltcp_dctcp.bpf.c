// SPDX-License-Identifier: GPL-2.0-only
/*
 * mltcp_dctcp - MLTCP-DCTCP.
 *
 * This kernel has no native DCTCP, so the DCTCP logic (RFC 8257, with the
 * Linux conventions: g = 1/16, alpha in 1/1024 units starting at 1, one
 * alpha update per window of data, cwnd * (1 - alpha/2) on ECE, halving on
 * loss, immediate ACK when the receiver's CE state flips) is written here.
 * One departure from the kernel's receiver: on a CE flip with a delayed ACK
 * pending, the kernel sends that ACK from inside the callback (tcp_send_ack with
 * the old state); a BPF program calling bpf_tcp_send_ack() would run the network
 * softirq inside itself, the strongest trigger of the kernel fault of
 * docs/known-issues.md.  This one asks TCP for an immediate ACK instead
 * (ICSK_ACK_NOW), which TCP sends once the segment is processed, echoing the new
 * state: the segments of the pending ACK are attributed to the new state (at most
 * one delayed ACK's worth per flip).
 * How it departs from DCTCP: in congestion avoidance the additive increase is
 * fed the ACKed packet count scaled by the job's F(bytes_ratio), so the window
 * grows F segments per RTT; slow start and the reductions are standard.
 * If ECN was not negotiated the flow behaves as (MLTCP-)Reno: halving on
 * loss, no alpha.  The ops set TCP_CONG_NEEDS_ECN so that ECN is negotiated
 * on SYN/SYN-ACK whatever the sysctl says.  The window is set from
 * cong_control() (mltcp_window.h: mltcp_control_begin), not cong_avoid(), so a garbage
 * ssthresh()/undo_cwnd() return (the same kernel fault) never becomes the window
 * (set_state(), cwnd_event() and min_tso_segs(), asked before every transmission,
 * contain it on the paths that skip cong_control()).
 */
#include "mltcp.h"
#include "mltcp_classify.h"
#include "mltcp_window.h"
#include "mltcp_f.h"

extern void tcp_reno_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;

#define DCTCP_MAX_ALPHA 1024U
#define DCTCP_SHIFT_G 4

struct mltcp_dctcp_ca {
	__u32 old_delivered;
	__u32 old_delivered_ce;
	__u32 alpha;
	__u32 next_seq;
	__u32 ce_state;
	__u32 loss_cwnd;
	__u32 ecn_off;
	struct mltcp_flow m;
};

_Static_assert(sizeof(struct mltcp_dctcp_ca) <= sizeof(((struct inet_connection_sock *)0)->icsk_ca_priv),
	       "MLTCP-DCTCP state must fit in icsk_ca_priv");

static __always_inline struct mltcp_dctcp_ca *dctcp_ca(struct sock *sk)
{
	return mltcp_ca_priv(sk);
}

/* DCTCP's ssthresh for the window before the reduction, for a reduction whose
 * ssthresh() invocation was lost. */
static __always_inline __u32 dctcp_ssthresh_of(struct sock *sk)
{
	struct mltcp_dctcp_ca *ca = dctcp_ca(sk);
	__u32 prior = mltcp_tcp_sk(sk)->prior_cwnd;
	__u32 next = ca->ecn_off ? prior >> 1 : prior - ((prior * ca->alpha) >> 11);

	return next > 2 ? next : 2;
}

static __always_inline void dctcp_reset_window(struct tcp_sock *tp, struct mltcp_dctcp_ca *ca)
{
	ca->next_seq = tp->snd_nxt;
	ca->old_delivered = tp->delivered;
	ca->old_delivered_ce = tp->delivered_ce;
}

SEC("struct_ops")
void BPF_PROG(mltcp_dctcp_init, struct sock *sk)
{
	struct tcp_sock *tp = mltcp_tcp_sk(sk);
	struct mltcp_dctcp_ca *ca = dctcp_ca(sk);

	ca->alpha = DCTCP_MAX_ALPHA;
	ca->loss_cwnd = 0;
	ca->ce_state = 0;
	/* Connection established without ECN (or still connecting: re-checked on
	 * the next init at establishment): behave as Reno. */
	ca->ecn_off = !(tp->ecn_flags & TCP_ECN_OK) &&
		      sk->__sk_common.skc_state != TCP_SYN_SENT &&
		      sk->__sk_common.skc_state != TCP_SYN_RECV &&
		      sk->__sk_common.skc_state != TCP_LISTEN &&
		      sk->__sk_common.skc_state != TCP_CLOSE;
	dctcp_reset_window(tp, ca);
	mltcp_flow_init(sk, &ca->m);
}

SEC("struct_ops")
void BPF_PROG(mltcp_dctcp_release, struct sock *sk)
{
	mltcp_flow_release(sk);
}

SEC("struct_ops")
__u32 BPF_PROG(mltcp_dctcp_ssthresh, struct sock *sk)
{
	struct mltcp_dctcp_ca *ca = dctcp_ca(sk);
	struct tcp_sock *tp = mltcp_tcp_sk(sk);
	__u32 cwnd = tp->snd_cwnd;
	__u32 next;

	mltcp_count_reduction(sk, &ca->m, 0);
	ca->loss_cwnd = cwnd;
	if (ca->ecn_off)
		next = cwnd >> 1;
	else
		next = cwnd - ((cwnd * ca->alpha) >> 11);
	return mltcp_note_ssthresh(sk, &ca->m, next > 2 ? next : 2);
}

/* Once per window of data: alpha = (1 - g) * alpha + g * F_marked. */
SEC("struct_ops")
void BPF_PROG(mltcp_dctcp_in_ack_event, struct sock *sk, __u32 flags)
{
	struct tcp_sock *tp = mltcp_tcp_sk(sk);
	struct mltcp_dctcp_ca *ca = dctcp_ca(sk);
	__u32 delivered, delivered_ce, alpha, decay;

	if ((__s32)(tp->snd_una - ca->next_seq) < 0)
		return;
	delivered = tp->delivered - ca->old_delivered;
	delivered_ce = tp->delivered_ce - ca->old_delivered_ce;
	alpha = ca->alpha;
	decay = alpha >> DCTCP_SHIFT_G;
	/* Let alpha reach zero: the last step removes what the shift cannot. */
	alpha -= decay ? decay : alpha;
	if (delivered_ce) {
		delivered_ce <<= (10 - DCTCP_SHIFT_G);
		delivered_ce /= delivered ? delivered : 1;
		alpha += delivered_ce;
		if (alpha > DCTCP_MAX_ALPHA)
			alpha = DCTCP_MAX_ALPHA;
	}
	ca->alpha = alpha;
	dctcp_reset_window(tp, ca);
}

static __always_inline void dctcp_react_to_loss(struct sock *sk, struct mltcp_dctcp_ca *ca)
{
	struct tcp_sock *tp = mltcp_tcp_sk(sk);
	__u32 half = tp->snd_cwnd >> 1;

	mltcp_count_reduction(sk, &ca->m, 1);
	ca->loss_cwnd = tp->snd_cwnd;
	ca->m.ssthresh = half > 2 ? half : 2;
	tp->snd_ssthresh = ca->m.ssthresh;
}

SEC("struct_ops")
void BPF_PROG(mltcp_dctcp_state, struct sock *sk, __u8 new_state)
{
	struct mltcp_dctcp_ca *ca = dctcp_ca(sk);

	/* Fast retransmit: a loss is a loss, halve like Reno (RTOs arrive as CA_EVENT_LOSS). */
	if (new_state == TCP_CA_Recovery && new_state != mltcp_icsk(sk)->icsk_ca_state)
		dctcp_react_to_loss(sk, ca);
	mltcp_on_set_state(sk, &ca->m, new_state);
}

/*
 * Receiver side: echo CE.  When the CE state flips while a delayed ACK is
 * pending, have TCP send an ACK right away (ICSK_ACK_NOW; see the top of the
 * file for why not bpf_tcp_send_ack()), so the sender sees the flip within one
 * segment, then switch ECE on/off.
 */
static __always_inline void dctcp_ce_state_update(struct sock *sk, struct mltcp_dctcp_ca *ca,
						  __u32 ce)
{
	struct tcp_sock *tp = mltcp_tcp_sk(sk);

	if (ca->ce_state != ce) {
		if (mltcp_icsk(sk)->icsk_ack.pending & ICSK_ACK_TIMER)
			mltcp_icsk(sk)->icsk_ack.pending |= ICSK_ACK_NOW;
		ca->ce_state = ce;
	}
	if (ce)
		tp->ecn_flags |= TCP_ECN_DEMAND_CWR;
	else
		tp->ecn_flags &= ~TCP_ECN_DEMAND_CWR;
}

SEC("struct_ops")
void BPF_PROG(mltcp_dctcp_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	struct mltcp_dctcp_ca *ca = dctcp_ca(sk);

	switch (ev) {
	case CA_EVENT_ECN_IS_CE:
		dctcp_ce_state_update(sk, ca, 1);
		break;
	case CA_EVENT_ECN_NO_CE:
		dctcp_ce_state_update(sk, ca, 0);
		break;
	case CA_EVENT_LOSS:
		dctcp_react_to_loss(sk, ca);
		break;
	case CA_EVENT_TX_START:
		mltcp_on_tx_start(sk, &ca->m);
		break;
	default:
		break;
	}
}

SEC("struct_ops")
void BPF_PROG(mltcp_dctcp_acked, struct sock *sk, const struct ack_sample *sample)
{
	mltcp_on_ack(sk, &dctcp_ca(sk)->m, MLTCP_CC_DCTCP);
}

SEC("struct_ops")
void BPF_PROG(mltcp_dctcp_cong_control, struct sock *sk, __u32 ack, int flag,
	      const struct rate_sample *rs)
{
	struct mltcp_dctcp_ca *ca = dctcp_ca(sk);
	int grew = 0;

	if (mltcp_control_begin(sk, &ca->m, dctcp_ssthresh_of(sk))) {
		mltcp_prr(sk, &ca->m, rs, flag);
	} else if (mltcp_may_raise(sk, flag)) {
		tcp_reno_cong_avoid(sk, ack, mltcp_scale_acked(sk, &ca->m, rs->acked_sacked));
		grew = 1;
	}
	mltcp_control_end(sk, &ca->m, grew);
}

SEC("struct_ops")
__u32 BPF_PROG(mltcp_dctcp_undo_cwnd, struct sock *sk)
{
	struct mltcp_dctcp_ca *ca = dctcp_ca(sk);
	__u32 cwnd = mltcp_tcp_sk(sk)->snd_cwnd;

	return cwnd > ca->loss_cwnd ? cwnd : ca->loss_cwnd;
}

SEC("struct_ops")
__u32 BPF_PROG(mltcp_dctcp_min_tso_segs, struct sock *sk)
{
	return mltcp_on_xmit(sk, &dctcp_ca(sk)->m);
}

SEC(".struct_ops")
struct tcp_congestion_ops mltcp_dctcp = {
	.init = (void *)mltcp_dctcp_init,
	.release = (void *)mltcp_dctcp_release,
	.in_ack_event = (void *)mltcp_dctcp_in_ack_event,
	.pkts_acked = (void *)mltcp_dctcp_acked,
	.cong_control = (void *)mltcp_dctcp_cong_control,
	.ssthresh = (void *)mltcp_dctcp_ssthresh,
	.set_state = (void *)mltcp_dctcp_state,
	.cwnd_event = (void *)mltcp_dctcp_cwnd_event,
	.min_tso_segs = (void *)mltcp_dctcp_min_tso_segs,
	.undo_cwnd = (void *)mltcp_dctcp_undo_cwnd,
	.flags = TCP_CONG_NEEDS_ECN,
	.name = "mltcp_dctcp",
};
