// Simulation-side helpers for the ns-3 backend, in C++ because they run per packet or
// per event and a Python callback there would dominate the run time:
//
// * TrainingJob: one synthetic training job as on the netns testbed: per iteration,
//   per phase (one, or several for model parallelism), compute (a timer), then every
//   worker sends the phase's bytes to its ring successor over its connections; the
//   phase ends when every successor has received them (barrier), and the next
//   compute starts.  Connections are created with the scheme's congestion class,
//   tagged with the job and the sending host for MLTCP.
// * Sampler: every period, each sampled queue disc's cumulative sent bytes, backlog,
//   drops and ECN marks (the common trace's link samples) and every job
//   connection's congestion window (its flow samples).
// * DoneWatcher: stops the simulation when every job is done.
#pragma once
#include "ns3/inet-socket-address.h"
#include "ns3/ipv4-address.h"
#include "ns3/node.h"
#include "ns3/packet.h"
#include "ns3/queue-disc.h"
#include "ns3/simulator.h"
#include "ns3/socket.h"
#include "ns3/tcp-socket-base.h"
#include "ns3/tcp-socket-factory.h"

#include "mltcp_routing.h"
#include "mltcp_tcp.h"

#include <algorithm>
#include <string>
#include <vector>

namespace ns3 {

class TrainingJob : public SimpleRefCount<TrainingJob> {
 public:
  // Setup (before Start): the workers in ring order, and per phase of an iteration its
  // compute time and the bytes every worker sends to its successor (one phase unless
  // the job is model-parallel), split evenly over `connections` connections.
  std::vector<Ptr<Node>> nodes;
  std::vector<Ipv4Address> addrs;
  uint16_t port = 9000;
  std::vector<double> phase_compute_s;
  std::vector<uint64_t> phase_bytes;
  uint32_t connections = 1;
  uint32_t iterations = 1;
  std::vector<double> jitter_s;      // added to iteration k's first compute phase
  std::string cc_type = "ns3::TcpCubic";
  uint32_t job_id = 0;               // MLTCP tracker id; 0 = standard flows

  // Results: seconds since the simulation start; phases flattened (iteration-major).
  std::vector<double> rec_start, rec_comm_start, rec_comm_end, rec_phase_start, rec_phase_end;
  // The current congestion window of every sending connection (worker-major), kept
  // up to date by the sockets' CongestionWindow trace source for the sampler.
  std::vector<uint32_t> cwnd_now;
  bool done = false;

  // Connections open at time 0 (inside the run: queue discs initialise when the
  // simulation starts, and a SYN sent before that would find none); the first
  // iteration starts at at_s.
  void Start(double at_s) {
    cwnd_now.assign(nodes.size() * connections, 0);
    Simulator::Schedule(Seconds(0), &TrainingJob::Open, this);
    Simulator::Schedule(Seconds(at_s), &TrainingJob::BeginIteration, this);
  }

 private:
  Ptr<TcpCongestionOps> NewCongestionOps(std::size_t worker) const {
    ObjectFactory f;
    f.SetTypeId(cc_type);
    Ptr<TcpCongestionOps> cc = f.Create<TcpCongestionOps>();
    TypeId::AttributeInformation info;
    if (job_id && cc->GetInstanceTypeId().LookupAttributeByName("JobId", &info)) {
      cc->SetAttribute("JobId", UintegerValue(job_id));
      cc->SetAttribute("NodeId", UintegerValue(nodes[worker]->GetId()));
    }
    return cc;
  }

  void Open() {
    const std::size_t n = nodes.size();
    uint64_t most = 0;
    for (uint64_t b : phase_bytes) most = std::max(most, b);
    m_received.assign(n, 0);
    m_left.assign(n * connections, 0);
    for (std::size_t i = 0; i < n; ++i) {
      Ptr<Socket> srv = Socket::CreateSocket(nodes[i], TcpSocketFactory::GetTypeId());
      srv->Bind(InetSocketAddress(Ipv4Address::GetAny(), port));
      srv->Listen();
      srv->SetAcceptCallback(MakeNullCallback<bool, Ptr<Socket>, const Address&>(),
                             MakeBoundCallback(&TrainingJob::Accepted, this, i));
      m_listeners.push_back(srv);
    }
    for (std::size_t i = 0; i < n; ++i) {
      for (uint32_t c = 0; c < connections; ++c) {
        const std::size_t k = i * connections + c;
        Ptr<Socket> s = Socket::CreateSocket(nodes[i], TcpSocketFactory::GetTypeId());
        DynamicCast<TcpSocketBase>(s)->SetCongestionControlAlgorithm(NewCongestionOps(i));
        s->SetAttribute("SndBufSize", UintegerValue(most / connections + (1u << 20)));
        s->TraceConnectWithoutContext("CongestionWindow",
                                      MakeBoundCallback(&TrainingJob::CwndChanged, this, k));
        s->Bind();
        s->Connect(InetSocketAddress(addrs[(i + 1) % n], port));
        s->SetSendCallback(MakeBoundCallback(&TrainingJob::CanSend, this, k));
        m_senders.push_back(s);
      }
    }
  }

  std::vector<Ptr<Socket>> m_listeners, m_senders, m_accepted;
  std::vector<uint64_t> m_received, m_left;
  uint64_t m_want = 0;               // bytes every receiver must have for this phase to end
  uint32_t m_iter = 0, m_phase = 0;
  bool m_communicating = false;

  static void CwndChanged(TrainingJob* job, std::size_t k, uint32_t, uint32_t cwnd) {
    job->cwnd_now[k] = cwnd;
  }

  static void Accepted(TrainingJob* job, std::size_t i, Ptr<Socket> s, const Address&) {
    // Worker i's listener accepts its predecessor's connections.
    job->m_accepted.push_back(s);
    s->SetRecvCallback(MakeBoundCallback(&TrainingJob::Received, job, i));
  }

  void BeginIteration() {
    rec_start.push_back(Simulator::Now().GetSeconds());
    m_phase = 0;
    BeginPhase();
  }

  void BeginPhase() {
    double compute = phase_compute_s[m_phase];
    if (m_phase == 0 && m_iter < jitter_s.size()) compute += jitter_s[m_iter];
    Simulator::Schedule(Seconds(compute > 0 ? compute : 0.0), &TrainingJob::BeginComm, this);
  }

  void BeginComm() {
    const double now = Simulator::Now().GetSeconds();
    if (m_phase == 0) rec_comm_start.push_back(now);
    rec_phase_start.push_back(now);
    const uint64_t bytes = phase_bytes[m_phase];
    m_want += bytes;
    m_communicating = true;
    for (std::size_t k = 0; k < m_senders.size(); ++k) {
      // Even split over a worker's connections, the first ones one byte more.
      const uint32_t c = static_cast<uint32_t>(k % connections);
      m_left[k] = bytes / connections + (c < bytes % connections ? 1 : 0);
      Push(k);
    }
    CheckBarrier();                  // a phase of no bytes ends at once
  }

  static void CanSend(TrainingJob* job, std::size_t k, Ptr<Socket>, uint32_t) { job->Push(k); }

  void Push(std::size_t k) {
    Ptr<Socket> s = m_senders[k];
    while (m_left[k] > 0) {
      uint32_t room = s->GetTxAvailable();
      if (room == 0) return;
      uint32_t chunk = static_cast<uint32_t>(std::min<uint64_t>({m_left[k], room, 1u << 20}));
      int sent = s->Send(Create<Packet>(chunk));
      if (sent <= 0) return;
      m_left[k] -= static_cast<uint64_t>(sent);
    }
  }

  static void Received(TrainingJob* job, std::size_t i, Ptr<Socket> s) {
    Ptr<Packet> p;
    while ((p = s->Recv())) job->m_received[i] += p->GetSize();
    job->CheckBarrier();
  }

  // The barrier: a phase ends when every worker has received its predecessor's bytes.
  void CheckBarrier() {
    if (done || !m_communicating) return;
    for (uint64_t got : m_received) {
      if (got < m_want) return;
    }
    const double now = Simulator::Now().GetSeconds();
    m_communicating = false;
    rec_phase_end.push_back(now);
    if (++m_phase < phase_bytes.size()) {
      BeginPhase();
      return;
    }
    rec_comm_end.push_back(now);
    if (++m_iter >= iterations) {
      done = true;
      return;
    }
    BeginIteration();
  }
};

// Every period: per sampled queue disc its cumulative sent bytes, backlog, drops and
// ECN marks (the common trace's link samples), and per job connection its congestion
// window (the trace's flow samples).
class Sampler : public SimpleRefCount<Sampler> {
 public:
  std::vector<Ptr<QueueDisc>> queues;
  std::vector<Ptr<TrainingJob>> jobs;
  double period_s = 0.01;
  std::vector<double> times;
  std::vector<std::vector<uint64_t>> sent, backlog, drops, marks;  // [queue][sample]
  std::vector<std::vector<uint32_t>> cwnd;                          // [flow][sample]
  bool stop = false;

  void Start() {
    sent.assign(queues.size(), {});
    backlog.assign(queues.size(), {});
    drops.assign(queues.size(), {});
    marks.assign(queues.size(), {});
    std::size_t flows = 0;
    for (auto& j : jobs) flows += j->cwnd_now.size();
    cwnd.assign(flows, {});
    Simulator::Schedule(Seconds(period_s), &Sampler::Sample, this);
  }

 private:
  void Sample() {
    times.push_back(Simulator::Now().GetSeconds());
    for (std::size_t q = 0; q < queues.size(); ++q) {
      const QueueDisc::Stats& st = queues[q]->GetStats();
      sent[q].push_back(st.nTotalSentBytes);
      backlog[q].push_back(queues[q]->GetNBytes());
      drops[q].push_back(st.nTotalDroppedPackets);
      marks[q].push_back(st.nTotalMarkedPackets);
    }
    std::size_t f = 0;
    for (auto& j : jobs) {
      for (uint32_t w : j->cwnd_now) cwnd[f++].push_back(w);
    }
    if (!stop) Simulator::Schedule(Seconds(period_s), &Sampler::Sample, this);
  }
};

// Stops the simulation once every job is done (checked every period).
class DoneWatcher : public SimpleRefCount<DoneWatcher> {
 public:
  std::vector<Ptr<TrainingJob>> jobs;
  Ptr<Sampler> sampler;
  double period_s = 0.01;
  void Start() { Simulator::Schedule(Seconds(period_s), &DoneWatcher::Check, this); }

 private:
  void Check() {
    for (auto& j : jobs) {
      if (!j->done) {
        Simulator::Schedule(Seconds(period_s), &DoneWatcher::Check, this);
        return;
      }
    }
    if (sampler) sampler->stop = true;
    Simulator::Stop();
  }
};

}  // namespace ns3
