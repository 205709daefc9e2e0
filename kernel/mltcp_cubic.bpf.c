// SPDX-License-Identifier: GPL-2.0-only
/*
 * mltcp_cubic - MLTCP-CUBIC.
 *
 * How it departs from the kernel's CUBIC (net/ipv4/tcp_cubic.c): it *is* the
 * kernel's CUBIC - every callback calls the built-in cubictcp_* kfuncs on the
 * same private state (struct bictcp) - except that in congestion avoidance the
 * ACKed packet count passed to cubictcp_cong_avoid() is scaled by the job's
 * F(bytes_ratio).  CUBIC turns acked packets into window growth through
 * tcp_cong_avoid_ai(cnt, acked) and its Reno-friendly estimate (ack_cnt), so
 * both grow F times faster per ACK; the cubic curve, HyStart, fast
 * convergence and beta are untouched.  With F = 1 (no job, disabled or stale
 * config) the calls are exactly the kernel's.  mltcp_repair() (a workaround for
 * a kernel fault, see mltcp.h) runs before the kernel's code in three callbacks.
 */
#include "mltcp.h"

extern void cubictcp_init(struct sock *sk) __ksym;
extern __u32 cubictcp_recalc_ssthresh(struct sock *sk) __ksym;
extern void cubictcp_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;
extern void cubictcp_state(struct sock *sk, __u8 new_state) __ksym;
extern void cubictcp_cwnd_event(struct sock *sk, enum tcp_ca_event event) __ksym;
extern void cubictcp_acked(struct sock *sk, const struct ack_sample *sample) __ksym;
extern __u32 tcp_reno_undo_cwnd(struct sock *sk) __ksym;

struct mltcp_cubic_ca {
	struct bictcp cubic;   /* the kernel's own CUBIC state, used by the kfuncs */
	struct mltcp_flow m;
};

_Static_assert(sizeof(struct mltcp_cubic_ca) <= sizeof(((struct inet_connection_sock *)0)->icsk_ca_priv),
	       "MLTCP-CUBIC state must fit in icsk_ca_priv");

static __always_inline struct mltcp_cubic_ca *cubic_ca(struct sock *sk)
{
	return mltcp_ca_priv(sk);
}

/* CUBIC's ssthresh (beta = 717/1024) for the window before the reduction. */
static __always_inline __u32 cubic_expected_ssthresh(struct sock *sk)
{
	__u32 next = (mltcp_tcp_sk(sk)->prior_cwnd * 717U) >> 10;

	return next > 2 ? next : 2;
}

SEC("struct_ops")
void BPF_PROG(mltcp_cubic_init, struct sock *sk)
{
	cubictcp_init(sk);
	mltcp_flow_init(sk, &cubic_ca(sk)->m);
}

SEC("struct_ops")
void BPF_PROG(mltcp_cubic_release, struct sock *sk)
{
	mltcp_flow_release(sk);
}

SEC("struct_ops")
void BPF_PROG(mltcp_cubic_acked, struct sock *sk, const struct ack_sample *sample)
{
	mltcp_repair(sk, cubic_expected_ssthresh(sk));
	cubictcp_acked(sk, sample);
	mltcp_on_ack(sk, &cubic_ca(sk)->m, MLTCP_CC_CUBIC);
}

SEC("struct_ops")
void BPF_PROG(mltcp_cubic_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	mltcp_repair(sk, cubic_expected_ssthresh(sk));
	cubictcp_cong_avoid(sk, ack, mltcp_scale_acked(sk, &cubic_ca(sk)->m, acked));
}

SEC("struct_ops")
__u32 BPF_PROG(mltcp_cubic_ssthresh, struct sock *sk)
{
	mltcp_count_reduction(sk, &cubic_ca(sk)->m, 0);
	return cubictcp_recalc_ssthresh(sk);
}

SEC("struct_ops")
void BPF_PROG(mltcp_cubic_state, struct sock *sk, __u8 new_state)
{
	mltcp_repair(sk, cubic_expected_ssthresh(sk));
	cubictcp_state(sk, new_state);
}

SEC("struct_ops")
void BPF_PROG(mltcp_cubic_cwnd_event, struct sock *sk, enum tcp_ca_event event)
{
	cubictcp_cwnd_event(sk, event);
	if (event == CA_EVENT_TX_START)
		mltcp_on_tx_start(sk, &cubic_ca(sk)->m);
}

SEC("struct_ops")
__u32 BPF_PROG(mltcp_cubic_undo_cwnd, struct sock *sk)
{
	return tcp_reno_undo_cwnd(sk);
}

SEC(".struct_ops")
struct tcp_congestion_ops mltcp_cubic = {
	.init = (void *)mltcp_cubic_init,
	.release = (void *)mltcp_cubic_release,
	.pkts_acked = (void *)mltcp_cubic_acked,
	.cong_avoid = (void *)mltcp_cubic_cong_avoid,
	.ssthresh = (void *)mltcp_cubic_ssthresh,
	.set_state = (void *)mltcp_cubic_state,
	.cwnd_event = (void *)mltcp_cubic_cwnd_event,
	.undo_cwnd = (void *)mltcp_cubic_undo_cwnd,
	.name = "mltcp_cubic",
};
