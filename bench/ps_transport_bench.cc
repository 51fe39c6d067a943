// ps_transport_bench: the parameter servers' transport (ZeroMQ, as shipped:
// ps::Client with its I/O thread, ps::ServerSocket with authentication)
// against cohort's communicators (shm, gloo send/recv) for the exchange a
// parameter server makes: a request of B bytes answered by a reply of B
// bytes (push-pull), one at a time.
//
//   cohortrun -np 2 build/bench/ps_transport_bench [--sizes 4K,256K,4M] [--iters 200] [--reps 5]
//
// Rank 0 asks, rank 1 answers. Transports run one after another inside each
// repetition (interleaved), each after a barrier; the table shows, per size,
// the median over repetitions of the mean round trip, and each transport's
// median ratio to zmq-ipc within the same repetition.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "cohort/comm/create.h"
#include "cohort/common/check.h"
#include "cohort/common/stats.h"
#include "cohort/parameter_server/transport.h"
#include "cohort/rendezvous/prefix_store.h"

using namespace cohort;
using Clock = std::chrono::steady_clock;

namespace {

size_t parse_size(const std::string& s) {
  const char unit = s.back();
  const size_t n = std::stoull(s);
  return unit == 'K' ? n << 10 : unit == 'M' ? n << 20 : n;
}

using cohort::median;

}  // namespace

int main(int argc, char** argv) {
  std::vector<size_t> sizes = {4 << 10, 256 << 10, 4 << 20};
  int iters = 200, reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i], v = argv[i + 1];
    if (f == "--iters") {
      iters = std::stoi(v);
    } else if (f == "--reps") {
      reps = std::stoi(v);
    } else if (f == "--sizes") {
      sizes.clear();
      for (size_t at = 0; at <= v.size();) {
        const size_t comma = std::min(v.find(',', at), v.size());
        sizes.push_back(parse_size(v.substr(at, comma - at)));
        at = comma + 1;
      }
    } else {
      std::fprintf(stderr, "ps_transport_bench: unknown flag %s\n", f.c_str());
      return 2;
    }
  }
  comm::World world = comm::init_world();
  const int rank = world.info.rank;
  COHORT_CHECK_AS(ConfigError, world.info.size == 2) << "run with cohortrun -np 2";
  auto& shm = *world.comm;
  comm::CommunicatorOptions gloo_options = comm::options_from_env();
  gloo_options.backend = "gloo";
  gloo_options.store_host = world.info.store_host;
  auto gloo = comm::create_communicator(std::make_shared<rendezvous::PrefixStore>("bench-gloo", world.store), rank, 2,
                                        gloo_options);

  // ZeroMQ: rank 1 listens on tcp and ipc; rank 0 has a client of each kind.
  // A second server authenticates tcp with PLAIN (COHORT_PS_TCP_SECURITY=plain).
  std::unique_ptr<ps::ServerSocket> server, plain_server;
  std::map<std::string, std::unique_ptr<ps::Client>> clients;
  if (rank == 1) {
    server = std::make_unique<ps::ServerSocket>(
        ps::ServerSocketOptions{.secret = world.info.secret, .job_id = world.info.job_id, .tcp_security = "curve"});
    plain_server = std::make_unique<ps::ServerSocket>(ps::ServerSocketOptions{
        .secret = world.info.secret, .ipc = false, .job_id = world.info.job_id, .tcp_security = "plain"});
    world.store->set("bench-ps-address", server->address().encode());
    world.store->set("bench-ps-plain-address", plain_server->address().encode());
  } else {
    const auto address = ps::ServerAddress::decode(world.store->get("bench-ps-address"));
    const auto plain = ps::ServerAddress::decode(world.store->get("bench-ps-plain-address"));
    for (auto [name, transport] : {std::pair{"zmq-ipc", "ipc"}, std::pair{"zmq-tcp-curve", "tcp"},
                                   std::pair{"zmq-tcp-plain", "tcp"}}) {
      ps::ClientOptions o;
      o.secret = world.info.secret;
      o.transport = transport;
      o.name = name;
      o.server_timeout = std::chrono::hours(1);  // the server only reads during its phase
      clients[name] = std::make_unique<ps::Client>(o);
      clients[name]->add_server(0, std::string(name) == "zmq-tcp-plain" ? plain : address);
    }
  }

  const std::vector<std::string> names = {"zmq-ipc", "zmq-tcp-curve", "zmq-tcp-plain", "shm", "gloo"};
  // results[size][name] = per-repetition mean round trip (us)
  std::map<size_t, std::map<std::string, std::vector<double>>> results;
  for (int rep = 0; rep < reps; ++rep) {
    for (size_t bytes : sizes) {
      std::vector<float> buffer(bytes / sizeof(float), 1.0f);
      const BufferView view{buffer.data(), buffer.size(), DType::f32};
      for (const std::string& name : names) {
        shm.barrier();
        const auto start = Clock::now();
        if (name == "shm" || name == "gloo") {
          comm::Communicator& c = name == "shm" ? shm : *gloo;
          for (int i = 0; i < iters; ++i) {
            if (rank == 0) {
              c.send(view, 1, 7);
              c.recv(view, 1, 8);
            } else {
              c.recv(view, 0, 7);
              c.send(view, 0, 8);
            }
          }
        } else if (rank == 0) {
          ps::Client& client = *clients[name];
          for (int i = 0; i < iters; ++i) {
            ps::Message m(ps::Op::push_pull);
            m.add(buffer.data(), bytes);
            client
                .request(ps::Target::to_server(0), std::move(m),
                         [&](ps::Message& reply) {
                           COHORT_CHECK_EQ(reply.frames.at(0).size(), bytes);
                           std::memcpy(buffer.data(), reply.frames[0].data(), bytes);
                         },
                         "echo")
                .wait();
          }
        } else {
          ps::ServerSocket& s = name == "zmq-tcp-plain" ? *plain_server : *server;
          ps::Message m;
          std::string peer;
          for (int answered = 0; answered < iters;) {
            s.wait(std::chrono::milliseconds(100), -1);
            while (s.receive(m, peer)) {
              const bool ping = m.kind() == ps::Op::ping;
              s.reply(peer, m);  // the echo: same header and payload back
              if (!ping) ++answered;
              m = ps::Message();
            }
          }
        }
        const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count() / iters;
        results[bytes][name].push_back(us);
      }
    }
  }
  if (rank == 0) {
    std::printf("| size | transport | round trip (us, median of %d) | MB/s each way | ratio to zmq-ipc |\n", reps);
    std::printf("|---|---|---|---|---|\n");
    for (size_t bytes : sizes) {
      for (const std::string& name : names) {
        std::vector<double> ratios;
        for (int r = 0; r < reps; ++r) ratios.push_back(results[bytes][name][r] / results[bytes]["zmq-ipc"][r]);
        const double us = median(results[bytes][name]);
        std::printf("| %zu KiB | %s | %.1f | %.0f | %.2f |\n", bytes >> 10, name.c_str(), us, bytes / us,
                    median(ratios));
      }
    }
  }
  shm.barrier();
  return 0;
}
