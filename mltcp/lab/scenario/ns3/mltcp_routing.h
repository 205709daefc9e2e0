// Per-flow paths for the ns-3 backend's multipath fabrics (leaf-spine).
//
// ns-3's global routing either takes the first of several equal-cost routes or
// sprays packets over them at random (RandomEcmpRouting), which reorders TCP; a real
// switch hashes each flow onto one path.  FlowPathRouting is that hash made explicit:
// the Python side picks every ring flow's path (mltcp.lab.scenario.graph.ring_flow_path,
// the same choice the fluid model makes for the same seed) and installs, on each switch the
// flow crosses, an entry (source host, destination host) -> (output interface, next
// hop).  Packets with no entry (ACKs, ARP-free point-to-point control) fall through
// to the next protocol of the node's list routing: global routing.
#pragma once
#include "ns3/ipv4-list-routing.h"
#include "ns3/ipv4-route.h"
#include "ns3/ipv4-routing-protocol.h"
#include "ns3/ipv4.h"
#include "ns3/net-device.h"
#include "ns3/node.h"

#include <map>
#include <utility>

namespace ns3 {

class FlowPathRouting : public Ipv4RoutingProtocol {
 public:
  static TypeId GetTypeId() {
    static TypeId tid = TypeId("ns3::FlowPathRouting")
                            .SetParent<Ipv4RoutingProtocol>()
                            .SetGroupName("Internet")
                            .AddConstructor<FlowPathRouting>();
    return tid;
  }

  // The routing of `node`, created and put in front of its list routing on first use.
  static Ptr<FlowPathRouting> On(Ptr<Node> node) {
    Ptr<Ipv4> ipv4 = node->GetObject<Ipv4>();
    Ptr<Ipv4ListRouting> list = DynamicCast<Ipv4ListRouting>(ipv4->GetRoutingProtocol());
    int16_t priority = 0;
    for (uint32_t i = 0; i < list->GetNRoutingProtocols(); ++i) {
      Ptr<FlowPathRouting> mine =
          DynamicCast<FlowPathRouting>(list->GetRoutingProtocol(i, priority));
      if (mine) return mine;
    }
    Ptr<FlowPathRouting> mine = CreateObject<FlowPathRouting>();
    list->AddRoutingProtocol(mine, 100);  // before static (0) and global (-10)
    return mine;
  }

  // Packets from `src` to `dst` leave through `device` towards `gateway`.
  void Add(Ipv4Address src, Ipv4Address dst, Ptr<NetDevice> device, Ipv4Address gateway) {
    m_paths[{src.Get(), dst.Get()}] = {device, gateway};
  }
  std::size_t Size() const { return m_paths.size(); }

  Ptr<Ipv4Route> RouteOutput(Ptr<Packet>, const Ipv4Header& header, Ptr<NetDevice>,
                             Socket::SocketErrno& sockerr) override {
    // Locally originated packets: on switches there are none worth steering.
    Ptr<Ipv4Route> route = Lookup(header);
    sockerr = route ? Socket::ERROR_NOTERROR : Socket::ERROR_NOROUTETOHOST;
    return route;
  }

  bool RouteInput(Ptr<const Packet> p, const Ipv4Header& header, Ptr<const NetDevice>,
                  const UnicastForwardCallback& ucb, const MulticastForwardCallback&,
                  const LocalDeliverCallback&, const ErrorCallback&) override {
    Ptr<Ipv4Route> route = Lookup(header);
    if (!route) return false;
    ucb(route, p, header);
    return true;
  }

  void NotifyInterfaceUp(uint32_t) override {}
  void NotifyInterfaceDown(uint32_t) override {}
  void NotifyAddAddress(uint32_t, Ipv4InterfaceAddress) override {}
  void NotifyRemoveAddress(uint32_t, Ipv4InterfaceAddress) override {}
  void SetIpv4(Ptr<Ipv4> ipv4) override { m_ipv4 = ipv4; }
  void PrintRoutingTable(Ptr<OutputStreamWrapper> stream, Time::Unit) const override {
    *stream->GetStream() << "FlowPathRouting: " << m_paths.size() << " flow paths\n";
  }

 private:
  Ptr<Ipv4Route> Lookup(const Ipv4Header& header) const {
    auto it = m_paths.find({header.GetSource().Get(), header.GetDestination().Get()});
    if (it == m_paths.end()) return nullptr;
    Ptr<NetDevice> dev = it->second.first;
    Ptr<Ipv4Route> route = Create<Ipv4Route>();
    route->SetDestination(header.GetDestination());
    route->SetGateway(it->second.second);
    route->SetOutputDevice(dev);
    route->SetSource(m_ipv4->GetAddress(m_ipv4->GetInterfaceForDevice(dev), 0).GetLocal());
    return route;
  }

  Ptr<Ipv4> m_ipv4;
  std::map<std::pair<uint32_t, uint32_t>, std::pair<Ptr<NetDevice>, Ipv4Address>> m_paths;
};

}  // namespace ns3
