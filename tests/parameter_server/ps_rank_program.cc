// A rank of a parameter-server job for the process and cluster tests: the
// last `servers` ranks serve, the others train the test problem
// (problem.h) and write their final parameters to <result>.<worker>.
//
//   ps_rank_program servers=2 steps=12 rule=sgd staleness=0 replicas=1 shards=2
//                   die_worker=W die_step=K        (worker W kills itself before committing step K)
//                   kill_server=S kill_step=K      (worker 0 kills server S's process before committing
//                                                   step K, once every worker has pulled step K)
//                   result=/tmp/x save=DIR load=DIR lr=0.1
//                   timeline=1                     (workers print "timeline <worker> <event> <step> <ns>"
//                                                   on the monotonic clock, and "loss <worker> <step>
//                                                   <value>": bench/ps_recovery_bench, ps_straggler_bench)
//                   step_ms=D slow_worker=W        (every step takes D ms more, worker W's 2 D:
//                                                   bench/ps_straggler_bench)
//                   step_ms=D straggle=rotating burst=B
//                                                  (every step takes D ms more; worker k's 2 D in its
//                                                   steps s with (s / B) mod workers == k: a straggler
//                                                   that moves from worker to worker)
// It finds the job through discovery (cohortrun, or the test's COHORT_*
// variables) and exits 0 when its role finished.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <string>

#include "cohort/common/logging.h"
#include "cohort/parameter_server/roles.h"
#include "cohort/parameter_server/server.h"
#include "cohort/rendezvous/discovery.h"
#include "cohort/rendezvous/prefix_store.h"
#include "cohort/rendezvous/tcp_store.h"
#include "tests/parameter_server/train_loop.h"

using namespace cohort;

int main(int argc, char** argv) {
  std::map<std::string, std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto eq = a.find('=');
    args[a.substr(0, eq)] = eq == std::string::npos ? "1" : a.substr(eq + 1);
  }
  auto arg = [&](const std::string& k, const std::string& d) { return args.count(k) ? args[k] : d; };
  try {
    const rendezvous::LaunchInfo info = rendezvous::discover();
    logging::set_rank(info.rank);
    auto tcp = std::make_shared<rendezvous::TcpStore>(
        rendezvous::TcpStoreOptions{.host = info.store_host, .port = info.store_port, .secret = info.secret});
    auto store = std::make_shared<rendezvous::PrefixStore>("ps", tcp);
    std::map<std::string, std::string> keys = {{"servers", arg("servers", "1")},
                                               {"staleness", arg("staleness", "0")},
                                               {"optimizer", arg("rule", "sgd")},
                                               {"lr", arg("lr", "0.1")},
                                               {"replicas", arg("replicas", "0")},
                                               {"shards", arg("shards", "2")}};
    if (args.count("checkpoint_dir")) keys["checkpoint_dir"] = args["checkpoint_dir"];
    const ps::JobOptions job = ps::parse_job_options(keys, info.size);
    const ps::Role role = ps::assign_role(info.rank, info.size, job.servers);
    if (role.server) {
      const ps::ServerOptions o = ps::server_options_for(info, role, job);
      ps::Server server(store, o);
      store->set("pid/" + std::to_string(role.index), std::to_string(::getpid()));
      server.run();
      return 0;
    }
    ps::WorkerOptions o{.worker = role.index, .num_workers = role.num_workers, .num_servers = role.num_servers,
                        .job = job, .secret = info.secret};
    ps::Worker worker(store, o);
    ps::testing::Problem p;
    ps::testing::TrainHooks hooks;
    const int die_worker = std::stoi(arg("die_worker", "-1"));
    const int64_t die_step = std::stoll(arg("die_step", "-1"));
    const int kill_server = std::stoi(arg("kill_server", "-1"));
    const int64_t kill_step = std::stoll(arg("kill_step", "-1"));
    const bool timeline = args.count("timeline") != 0;
    auto stamp = [&](const char* event, int64_t step) {
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
      std::printf("timeline %d %s %lld %lld\n", role.index, event, static_cast<long long>(step),
                  static_cast<long long>(ns));
      std::fflush(stdout);
    };
    // Every worker says when it has pulled the kill step's parameters, and
    // worker 0 kills only then: every gradient of that step comes from the
    // values before the loss, whichever worker was slower.
    auto pulled_key = [](int worker, int64_t s) {
      return "pulled/" + std::to_string(worker) + "/" + std::to_string(s);
    };
    hooks.after_pull = [&](int64_t s) {
      if (timeline) stamp("pulled", s);
      if (kill_server >= 0 && s == kill_step) store->set(pulled_key(role.index, s), "1");
    };
    if (timeline) {
      hooks.after_gradients = [&](int64_t s, double loss) {
        std::printf("loss %d %lld %.17g\n", role.index, static_cast<long long>(s), loss);
      };
    }
    hooks.before_commit = [&](int64_t s) {
      if (role.index == die_worker && s == die_step) {
        std::cerr << "worker " << role.index << " dies before committing step " << s << std::endl;
        ::raise(SIGKILL);
      }
      if (role.index == 0 && kill_server >= 0 && s == kill_step) {
        std::vector<std::string> pulled;
        for (int k = 0; k < role.num_workers; ++k) pulled.push_back(pulled_key(k, s));
        store->wait(pulled, store->default_timeout());
        const pid_t pid = static_cast<pid_t>(std::stol(store->get("pid/" + std::to_string(kill_server))));
        std::cerr << "worker 0 kills server " << kill_server << " (pid " << pid << ") at step " << s << std::endl;
        if (timeline) stamp("kill", s);
        ::kill(pid, SIGKILL);
      }
    };
    const std::chrono::milliseconds step_ms(std::stoll(arg("step_ms", "0")));
    const int slow_worker = std::stoi(arg("slow_worker", "-1"));
    const bool rotating = arg("straggle", "persistent") == "rotating";
    const int64_t burst = std::stoll(arg("burst", "4"));
    hooks.delay = [&, step_ms, slow_worker, rotating, burst](int64_t s) {
      const bool slow = rotating ? (s / burst) % role.num_workers == role.index : role.index == slow_worker;
      return std::chrono::microseconds(slow ? 2 * step_ms : step_ms);
    };
    const int64_t steps = std::stoll(arg("steps", "10"));
    const auto result = ps::testing::train(worker, p, steps, hooks, arg("load", ""));
    if (timeline) stamp("done", steps);
    if (args.count("save") && role.index == 0) worker.save(args["save"]);
    if (args.count("result")) {
      std::ofstream out(args["result"] + "." + std::to_string(role.index));
      out.precision(17);
      for (double v : result.w) out << v << "\n";
      for (double v : result.emb) out << v << "\n";
    }
    worker.finish();
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "ps_rank_program: " << e.what() << std::endl;
    return 1;
  }
}
