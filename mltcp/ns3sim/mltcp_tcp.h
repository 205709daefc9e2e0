// MLTCP versions of ns-3's TcpLinuxReno, TcpCubic and TcpDctcp.
//
// How they depart from ns-3's classes: in congestion avoidance, the segments acked
// that the algorithm's window growth sees are multiplied by F(bytes_ratio) (Q16.16,
// with the remainder carried per flow), where bytes_ratio comes from the flow's job
// tracker (mltcp_tracker.h), shared by every connection of the job on the same host.
// Slow start, the multiplicative decrease and DCTCP's alpha are unchanged.  A flow
// of no job (JobId 0) is the unmodified algorithm, as in the kernel datapath.
//
// MltcpCubic scales CUBIC's per-ACK growth only.  The kernel's mltcp_cubic also
// advances CUBIC's clock (epoch start) by F; ns-3 keeps that state private, so this
// class cannot, and its unfairness at equal F is the smaller of the two.
#pragma once
#include "ns3/double.h"
#include "ns3/simulator.h"
#include "ns3/tcp-cubic.h"
#include "ns3/tcp-dctcp.h"
#include "ns3/tcp-linux-reno.h"
#include "ns3/tcp-socket-state.h"
#include "ns3/uinteger.h"

#include "mltcp_tracker.h"

#include <cmath>
#include <map>
#include <utility>

namespace ns3 {

// Trackers by (job id, node id): a job's bytes_ratio is per job per host.
class MltcpJobs {
 public:
  static mltcp::IterationTracker& Get(uint32_t job, uint32_t node) {
    return Table()[{job, node}];
  }
  static bool Has(uint32_t job, uint32_t node) { return Table().count({job, node}) > 0; }
  static void Configure(uint32_t job, uint32_t node, uint64_t budget, double slope,
                        double intercept, double cap, uint64_t gap_ns) {
    mltcp::IterationTracker& t = Get(job, node);
    t.budget = budget;
    t.gap_ns = gap_ns;
    t.agg.slope_fp = static_cast<uint64_t>(std::llround(slope * mltcp::kFpOne));
    t.agg.intercept_fp = static_cast<uint64_t>(std::llround(intercept * mltcp::kFpOne));
    t.agg.cap_fp = cap > 0 ? static_cast<uint64_t>(std::llround(cap * mltcp::kFpOne)) : 0;
  }
  static void Clear() { Table().clear(); }

 private:
  static std::map<std::pair<uint32_t, uint32_t>, mltcp::IterationTracker>& Table() {
    static std::map<std::pair<uint32_t, uint32_t>, mltcp::IterationTracker> table;
    return table;
  }
};

// The per-flow part every MLTCP class shares: which job, and the carried fraction.
class MltcpFlow {
 public:
  uint32_t m_job{0};
  uint32_t m_node{0};
  uint64_t m_frac{0};

  mltcp::IterationTracker* Tracker() {
    return m_job && MltcpJobs::Has(m_job, m_node) ? &MltcpJobs::Get(m_job, m_node) : nullptr;
  }
  static uint64_t NowNs() { return static_cast<uint64_t>(Simulator::Now().GetNanoSeconds()); }
  void Acked(Ptr<TcpSocketState> tcb, uint32_t segments) {
    if (auto* t = Tracker()) t->OnAck(uint64_t(segments) * tcb->m_segmentSize, NowNs());
  }
  void Event(Ptr<TcpSocketState> tcb, TcpSocketState::TcpCAEvent_t event) {
    if (event != TcpSocketState::CA_EVENT_TX_START) return;
    if (auto* t = Tracker()) t->OnTxStart(NowNs(), tcb->m_bytesInFlight.Get());
  }
  uint32_t Scaled(uint32_t segments) {
    auto* t = Tracker();
    if (!t) return segments;
    return static_cast<uint32_t>(mltcp::ScaleAcked(segments, t->f_fp, &m_frac));
  }
};

#define MLTCP_ATTRIBUTES(Cls)                                                          \
  .AddAttribute("JobId", "MLTCP job of this flow (0: none, the standard algorithm)",   \
                UintegerValue(0), MakeUintegerAccessor(&Cls::SetJob, &Cls::GetJob),    \
                MakeUintegerChecker<uint32_t>())                                        \
      .AddAttribute("NodeId", "host whose per-job counter this flow feeds",             \
                    UintegerValue(0), MakeUintegerAccessor(&Cls::SetNode, &Cls::GetNode), \
                    MakeUintegerChecker<uint32_t>())

#define MLTCP_ACCESSORS                                       \
  void SetJob(uint32_t v) { m_flow.m_job = v; }               \
  uint32_t GetJob() const { return m_flow.m_job; }            \
  void SetNode(uint32_t v) { m_flow.m_node = v; }             \
  uint32_t GetNode() const { return m_flow.m_node; }          \
  MltcpFlow m_flow;

class MltcpReno : public TcpLinuxReno {
 public:
  static TypeId GetTypeId() {
    static TypeId tid = TypeId("ns3::MltcpReno")
                            .SetParent<TcpLinuxReno>()
                            .SetGroupName("Internet")
                            .AddConstructor<MltcpReno>() MLTCP_ATTRIBUTES(MltcpReno);
    return tid;
  }
  MltcpReno() = default;
  MltcpReno(const MltcpReno& o) : TcpLinuxReno(o), m_flow(o.m_flow) {}
  std::string GetName() const override { return "MltcpReno"; }
  Ptr<TcpCongestionOps> Fork() override { return CopyObject<MltcpReno>(this); }
  void PktsAcked(Ptr<TcpSocketState> tcb, uint32_t segments, const Time& rtt) override {
    m_flow.Acked(tcb, segments);
    TcpLinuxReno::PktsAcked(tcb, segments, rtt);
  }
  void CwndEvent(Ptr<TcpSocketState> tcb, const TcpSocketState::TcpCAEvent_t event) override {
    m_flow.Event(tcb, event);
    TcpLinuxReno::CwndEvent(tcb, event);
  }
  MLTCP_ACCESSORS

 protected:
  void CongestionAvoidance(Ptr<TcpSocketState> tcb, uint32_t segments) override {
    TcpLinuxReno::CongestionAvoidance(tcb, m_flow.Scaled(segments));
  }
};

class MltcpDctcp : public TcpDctcp {
 public:
  static TypeId GetTypeId() {
    static TypeId tid = TypeId("ns3::MltcpDctcp")
                            .SetParent<TcpDctcp>()
                            .SetGroupName("Internet")
                            .AddConstructor<MltcpDctcp>() MLTCP_ATTRIBUTES(MltcpDctcp);
    return tid;
  }
  MltcpDctcp() = default;
  MltcpDctcp(const MltcpDctcp& o) : TcpDctcp(o), m_flow(o.m_flow) {}
  std::string GetName() const override { return "MltcpDctcp"; }
  Ptr<TcpCongestionOps> Fork() override { return CopyObject<MltcpDctcp>(this); }
  void PktsAcked(Ptr<TcpSocketState> tcb, uint32_t segments, const Time& rtt) override {
    m_flow.Acked(tcb, segments);
    TcpDctcp::PktsAcked(tcb, segments, rtt);
  }
  void CwndEvent(Ptr<TcpSocketState> tcb, const TcpSocketState::TcpCAEvent_t event) override {
    m_flow.Event(tcb, event);
    TcpDctcp::CwndEvent(tcb, event);
  }
  MLTCP_ACCESSORS

 protected:
  void CongestionAvoidance(Ptr<TcpSocketState> tcb, uint32_t segments) override {
    TcpDctcp::CongestionAvoidance(tcb, m_flow.Scaled(segments));
  }
};

class MltcpCubic : public TcpCubic {
 public:
  static TypeId GetTypeId() {
    static TypeId tid = TypeId("ns3::MltcpCubic")
                            .SetParent<TcpCubic>()
                            .SetGroupName("Internet")
                            .AddConstructor<MltcpCubic>() MLTCP_ATTRIBUTES(MltcpCubic);
    return tid;
  }
  MltcpCubic() = default;
  MltcpCubic(const MltcpCubic& o) : TcpCubic(o), m_flow(o.m_flow) {}
  std::string GetName() const override { return "MltcpCubic"; }
  Ptr<TcpCongestionOps> Fork() override { return CopyObject<MltcpCubic>(this); }
  void PktsAcked(Ptr<TcpSocketState> tcb, uint32_t segments, const Time& rtt) override {
    m_flow.Acked(tcb, segments);
    TcpCubic::PktsAcked(tcb, segments, rtt);
  }
  void CwndEvent(Ptr<TcpSocketState> tcb, const TcpSocketState::TcpCAEvent_t event) override {
    m_flow.Event(tcb, event);
    TcpCubic::CwndEvent(tcb, event);
  }
  void IncreaseWindow(Ptr<TcpSocketState> tcb, uint32_t segments) override {
    if (tcb->m_cWnd >= tcb->m_ssThresh) segments = m_flow.Scaled(segments);
    TcpCubic::IncreaseWindow(tcb, segments);
  }
  MLTCP_ACCESSORS
};

#undef MLTCP_ATTRIBUTES
#undef MLTCP_ACCESSORS

}  // namespace ns3
