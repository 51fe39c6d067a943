// StartWatch: whether the ranks started through the launch template are
// running, from the keys their remote ends set in the job's store (see
// started_key() in remote_rank.h). Backs cohortrun's --start-timeout.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "cohort/launcher/supervisor.h"
#include "cohort/rendezvous/store.h"

namespace cohort::launcher {

class StartWatch final : public StartCheck {
 public:
  // Rank `rank` on `host` started; `record` is what its remote end wrote
  // ("<host> pid <the program's pid there>").
  using Started = std::function<void(int rank, const std::string& host, const std::string& record)>;

  // `ranks` maps each watched rank to its host (for the message).
  // `on_started`, when given, is called for each rank once all have started.
  StartWatch(std::shared_ptr<rendezvous::Store> store, std::map<int, std::string> ranks, Started on_started = {});

  bool started() override;
  // "rank 2 on node2 and rank 3 on node2 did not start within the start
  // timeout (...)"; names at most 8 ranks.
  std::string describe_missing() override;

  // Whether rank `rank`'s remote end recorded its program's start.
  bool recorded_start(int rank);

 private:
  std::shared_ptr<rendezvous::Store> store_;
  std::map<int, std::string> pending_;
  Started on_started_;
};

}  // namespace cohort::launcher
