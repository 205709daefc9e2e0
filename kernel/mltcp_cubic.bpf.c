// SPDX-License-Identifier: GPL-2.0-only
/*
 * mltcp_cubic - MLTCP-CUBIC.
 *
 * How it departs from the kernel's CUBIC (net/ipv4/tcp_cubic.c): it *is* the
 * kernel's CUBIC - every callback calls the built-in cubictcp_* kfuncs on the
 * same private state (struct bictcp) - except that in congestion avoidance
 * CUBIC's growth is made F(bytes_ratio) times faster in both of the ways CUBIC
 * grows:
 *  - ACK-driven: the ACKed packet count passed to cubictcp_cong_avoid() is
 *    scaled by F, so tcp_cong_avoid_ai(cnt, acked) and the Reno-friendly
 *    estimate (ack_cnt) advance F times faster per ACK;
 *  - time-driven: CUBIC's window target is a function of the time since the
 *    last reduction (epoch_start), and the window only ever catches up with
 *    that target.  Scaling ACKs alone therefore changes little once the window
 *    tracks the curve (short RTTs, i.e. data centres).  MLTCP-CUBIC runs the
 *    curve's clock F times faster: per jiffy spent in congestion avoidance it
 *    moves epoch_start (F - 1) jiffies back (with a carried fraction).
 * Both speed-ups are bounded by CUBIC's own ceiling: the kernel never lets
 * the window grow by more than one segment per two ACKed (cnt >= 2, i.e. x1.5
 * per round trip), and MLTCP-CUBIC keeps that ceiling per ACK (a growth credit
 * of one half-segment per ACKed segment, at most one segment carried).
 * Without it an F of 5 grew the window ~x3.5 per round trip, faster than one
 * ECN or loss signal per round can rein in, and the flows lost thousands of
 * packets.
 * The curve's shape, HyStart, fast convergence and beta are untouched.
 * The window is set from cong_control() (mltcp_window.h: mltcp_control_begin), not
 * cong_avoid(): the reduction (PRR) runs on the ssthresh this module decided, so
 * a garbage ssthresh()/undo_cwnd() return (a kernel fault, docs/known-issues.md)
 * never becomes the window (set_state(), cwnd_event() and min_tso_segs(), asked
 * before every transmission, contain it on the paths that skip cong_control()).
 * With F = 1 (no job, disabled or stale config) the window follows the kernel's
 * CUBIC exactly.
 */
#include "mltcp.h"
#include "mltcp_classify.h"
#include "mltcp_window.h"
#include "mltcp_f.h"

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
	__u32 clock_jiffies;   /* jiffies at the previous congestion-avoidance ACK */
	__u16 clock_frac;      /* Q16 fraction of a jiffy the curve's clock is ahead */
	__u16 growth_credit;   /* half-segments the window may still grow by (<= 2) */
};

/* A longer pause between congestion-avoidance ACKs (idle, application- or
 * receiver-limited) is not time CUBIC spent growing: it does not speed the clock. */
#define MLTCP_CUBIC_MAX_STEP_JIFFIES 8

_Static_assert(sizeof(struct mltcp_cubic_ca) <= sizeof(((struct inet_connection_sock *)0)->icsk_ca_priv),
	       "MLTCP-CUBIC state must fit in icsk_ca_priv");

static __always_inline struct mltcp_cubic_ca *cubic_ca(struct sock *sk)
{
	return mltcp_ca_priv(sk);
}

/* CUBIC's ssthresh (beta = 717/1024) for the window before the reduction, for a
 * reduction whose ssthresh() invocation was lost. */
static __always_inline __u32 cubic_ssthresh_of(struct sock *sk)
{
	__u32 next = (mltcp_tcp_sk(sk)->prior_cwnd * 717U) >> 10;

	return next > 2 ? next : 2;
}

/* Advance CUBIC's curve by (F - 1) x the jiffies since the previous CA ACK. */
static __always_inline void mltcp_cubic_speed_clock(struct sock *sk, struct mltcp_cubic_ca *ca)
{
	struct tcp_sock *tp = mltcp_tcp_sk(sk);
	__u32 now = (__u32)bpf_jiffies64();
	__u32 step = now - ca->clock_jiffies;
	__u64 ahead;

	ca->clock_jiffies = now;
	if (ca->m.f_fp <= MLTCP_FP_ONE || tp->snd_cwnd < tp->snd_ssthresh ||
	    !ca->cubic.epoch_start || step > MLTCP_CUBIC_MAX_STEP_JIFFIES)
		return;
	ahead = (__u64)(ca->m.f_fp - MLTCP_FP_ONE) * step + ca->clock_frac;
	ca->clock_frac = ahead & (MLTCP_FP_ONE - 1);
	ca->cubic.epoch_start -= (__u32)(ahead >> MLTCP_FP_SHIFT);
	if (!ca->cubic.epoch_start)   /* 0 means "no epoch": one jiffy earlier instead */
		ca->cubic.epoch_start = (__u32)-1;
}

/* Hold the window's growth on this ACK to CUBIC's ceiling of acked/2 segments
 * (plus at most one segment of credit left from earlier ACKs). */
static __always_inline void mltcp_cubic_cap_growth(struct sock *sk, struct mltcp_cubic_ca *ca,
						   __u32 before, __u32 acked)
{
	struct tcp_sock *tp = mltcp_tcp_sk(sk);
	__u64 halves = (__u64)ca->growth_credit + acked;
	__u64 allowed = before + (halves >> 1);

	if (tp->snd_cwnd > allowed)
		tp->snd_cwnd = (__u32)allowed;
	if (tp->snd_cwnd > before)
		halves -= (__u64)(tp->snd_cwnd - before) << 1;
	ca->growth_credit = halves > 2 ? 2 : (__u16)halves;
}

SEC("struct_ops")
void BPF_PROG(mltcp_cubic_init, struct sock *sk)
{
	struct mltcp_cubic_ca *ca = cubic_ca(sk);

	cubictcp_init(sk);
	mltcp_flow_init(sk, &ca->m);
	ca->clock_jiffies = 0;
	ca->clock_frac = 0;
	ca->growth_credit = 0;
}

SEC("struct_ops")
void BPF_PROG(mltcp_cubic_release, struct sock *sk)
{
	mltcp_flow_release(sk);
}

SEC("struct_ops")
void BPF_PROG(mltcp_cubic_acked, struct sock *sk, const struct ack_sample *sample)
{
	cubictcp_acked(sk, sample);
	mltcp_on_ack(sk, &cubic_ca(sk)->m, MLTCP_CC_CUBIC);
}

/* The kernel's CUBIC growth for this ACK, F times faster within CUBIC's ceiling. */
static __always_inline void mltcp_cubic_grow(struct sock *sk, struct mltcp_cubic_ca *ca,
					     __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = mltcp_tcp_sk(sk);
	__u32 before = tp->snd_cwnd;
	bool sped = ca->m.f_fp > MLTCP_FP_ONE && before >= tp->snd_ssthresh;

	mltcp_cubic_speed_clock(sk, ca);
	cubictcp_cong_avoid(sk, ack, mltcp_scale_acked(sk, &ca->m, acked));
	if (sped)
		mltcp_cubic_cap_growth(sk, ca, before, acked);
}

SEC("struct_ops")
void BPF_PROG(mltcp_cubic_cong_control, struct sock *sk, __u32 ack, int flag,
	      const struct rate_sample *rs)
{
	struct mltcp_cubic_ca *ca = cubic_ca(sk);
	int grew = 0;

	if (mltcp_control_begin(sk, &ca->m, cubic_ssthresh_of(sk))) {
		mltcp_prr(sk, &ca->m, rs, flag);
	} else if (mltcp_may_raise(sk, flag)) {
		mltcp_cubic_grow(sk, ca, ack, rs->acked_sacked);
		grew = 1;
	}
	mltcp_control_end(sk, &ca->m, grew);
}

SEC("struct_ops")
__u32 BPF_PROG(mltcp_cubic_ssthresh, struct sock *sk)
{
	struct mltcp_cubic_ca *ca = cubic_ca(sk);

	mltcp_count_reduction(sk, &ca->m, 0);
	return mltcp_note_ssthresh(sk, &ca->m, cubictcp_recalc_ssthresh(sk));
}

SEC("struct_ops")
void BPF_PROG(mltcp_cubic_state, struct sock *sk, __u8 new_state)
{
	cubictcp_state(sk, new_state);
	mltcp_on_set_state(sk, &cubic_ca(sk)->m, new_state);
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

SEC("struct_ops")
__u32 BPF_PROG(mltcp_cubic_min_tso_segs, struct sock *sk)
{
	return mltcp_on_xmit(sk, &cubic_ca(sk)->m);
}

SEC(".struct_ops")
struct tcp_congestion_ops mltcp_cubic = {
	.init = (void *)mltcp_cubic_init,
	.release = (void *)mltcp_cubic_release,
	.pkts_acked = (void *)mltcp_cubic_acked,
	.cong_control = (void *)mltcp_cubic_cong_control,
	.ssthresh = (void *)mltcp_cubic_ssthresh,
	.set_state = (void *)mltcp_cubic_state,
	.cwnd_event = (void *)mltcp_cubic_cwnd_event,
	.min_tso_segs = (void *)mltcp_cubic_min_tso_segs,
	.undo_cwnd = (void *)mltcp_cubic_undo_cwnd,
	.name = "mltcp_cubic",
};
