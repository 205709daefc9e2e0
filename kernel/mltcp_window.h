/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * mltcp_window.h - the window is the module's own: every module sets TCP's window
 * through cong_control() instead of cong_avoid(), the reduction (PRR, RFC 6937) included.
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
 *
 * Here: the module's ssthresh (mltcp_note_ssthresh), the first and last parts of
 * every cong_control() (mltcp_control_begin, mltcp_control_end), PRR (mltcp_prr),
 * when to grow (mltcp_may_raise), and the containment on the paths that skip
 * cong_control() (mltcp_on_set_state, mltcp_on_xmit; a restart's is in mltcp_f.h,
 * mltcp_on_tx_start).
 */
#ifndef __MLTCP_WINDOW_H
#define __MLTCP_WINDOW_H

#include "mltcp.h"
#include "mltcp_health.h"

/* TCP's ACK flags (net/ipv4/tcp_input.c: macros, so not in vmlinux.h). */
#define MLTCP_FLAG_DATA_ACKED 0x04
#define MLTCP_FLAG_SYN_ACKED 0x10
#define MLTCP_FLAG_DATA_SACKED 0x20
#define MLTCP_FLAG_SND_UNA_ADVANCED 0x400
#define MLTCP_FLAG_FORWARD_PROGRESS \
	(MLTCP_FLAG_DATA_ACKED | MLTCP_FLAG_SYN_ACKED | MLTCP_FLAG_DATA_SACKED)
#define MLTCP_USEC_PER_SEC 1000000ULL

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

#endif /* __MLTCP_WINDOW_H */
