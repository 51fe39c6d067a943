// A program the launcher tests start as ranks. Its arguments are actions run
// in order; "@R:action" runs the action on rank R only (the rank is
// COHORT_RANK). Files go to $HELPER_DIR.
//
//   pid            write $HELPER_DIR/pid.<rank> and print "pid <pid>"
//   env            print NAME=value for every variable cohortrun sets
//   out:TEXT       print TEXT to stdout; err:TEXT to stderr
//   partial:TEXT   print TEXT to stdout without a newline
//   lines:N        print "line 0" .. "line N-1" to stdout
//   wait-file:NAME wait until $HELPER_DIR/NAME exists (without flushing
//                  stdout first: what was printed before shows whether the
//                  rank's stdout is line-buffered); exit 94 after 120 s
//   tty            print "stdout: tty|pipe" and "stderr: tty|pipe"
//   barrier        wait until all COHORT_SIZE ranks reached a barrier
//   shm            create /dev/shm/cohort-$COHORT_JOB_ID-test-<rank>
//   ignore:SIG     ignore SIGTERM (TERM), SIGINT (INT) or SIGHUP (HUP)
//   spawn-child    fork a child that sleeps 60 s; its pid in child.<rank>
//   fds            print "fds: none" or the inherited descriptors above 2
//   stdin          print "stdin: eof" when stdin is immediately at its end
//   store          meet the other ranks through the TCP store
//   sleep:S        sleep S seconds; exit:N exits with N; kill:N raises N
//   secret-scan    print "secret on command lines: N" (processes whose
//                  /proc/PID/cmdline holds $COHORT_SECRET) and "secret in
//                  environment: yes|no"
//   cwd            print "cwd <working directory>"
//   netns          print "netns <network namespace>" (/proc/self/ns/net)
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "cohort/rendezvous/tcp_store.h"

namespace {

int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : -1;
}

std::string env_str(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string helper_dir() {
  std::string dir = env_str("HELPER_DIR");
  if (dir.empty()) {
    std::fprintf(stderr, "rank_helper: HELPER_DIR is not set\n");
    std::exit(98);
  }
  return dir;
}

// Written under a temporary name and renamed, so readers never see half.
void write_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    f << text;
  }
  std::rename(tmp.c_str(), path.c_str());
}

int count_files(const std::string& dir, const std::string& prefix) {
  int n = 0;
  if (DIR* d = opendir(dir.c_str())) {
    while (const dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name.starts_with(prefix) && !name.ends_with(".tmp")) ++n;
    }
    closedir(d);
  }
  return n;
}

void barrier(int rank, int size) {
  const std::string dir = helper_dir();
  write_file(dir + "/ready." + std::to_string(rank), "1");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (count_files(dir, "ready.") < size) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "rank_helper: barrier timed out\n");
      std::exit(99);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void store_meeting() {
  using namespace cohort::rendezvous;
  const std::string address = env_str("COHORT_STORE_ADDR");
  const size_t colon = address.rfind(':');
  TcpStore store(TcpStoreOptions{.host = address.substr(0, colon),
                                 .port = std::atoi(address.substr(colon + 1).c_str()),
                                 .secret = env_str("COHORT_SECRET")});
  const int rank = env_int("COHORT_RANK");
  const int size = env_int("COHORT_SIZE");
  store.set("hello/" + std::to_string(rank), std::to_string(rank));
  for (int r = 0; r < size; ++r) {
    const Bytes value = store.get("hello/" + std::to_string(r), std::chrono::seconds(30));
    if (value != std::to_string(r)) {
      std::fprintf(stderr, "rank_helper: store returned '%s' for rank %d\n", value.c_str(), r);
      std::exit(97);
    }
  }
  std::printf("store ok %d of %d\n", rank, size);
}

int signal_number(const std::string& name) {
  if (name == "TERM") return SIGTERM;
  if (name == "INT") return SIGINT;
  if (name == "HUP") return SIGHUP;
  return std::atoi(name.c_str());
}

void run(const std::string& action, int rank, int size) {
  auto arg = [&](const char* prefix) -> std::string {
    return action.substr(std::strlen(prefix));
  };
  if (action == "pid") {
    write_file(helper_dir() + "/pid." + std::to_string(rank), std::to_string(getpid()));
    std::printf("pid %d\n", getpid());
  } else if (action == "env") {
    for (const char* name :
         {"COHORT_RANK", "COHORT_SIZE", "COHORT_LOCAL_RANK", "COHORT_LOCAL_SIZE", "COHORT_STORE_ADDR",
          "COHORT_JOB_ID", "COHORT_SECRET", "COHORT_BACKEND", "RANK", "WORLD_SIZE", "LOCAL_RANK",
          "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
          "MKL_NUM_THREADS", "FOO", "COHORT_HOST", "COHORT_IFACE", "COHORT_TEST_HOST", "COHORT_TIMEOUT_S",
          "COHORT_TIMELINE"}) {
      if (const char* v = std::getenv(name)) std::printf("%s=%s\n", name, v);
      else std::printf("%s unset\n", name);
    }
  } else if (action.starts_with("out:")) {
    std::printf("%s\n", arg("out:").c_str());
  } else if (action.starts_with("err:")) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s\n", arg("err:").c_str());
  } else if (action.starts_with("partial:")) {
    std::printf("%s", arg("partial:").c_str());
  } else if (action.starts_with("lines:")) {
    const int n = std::atoi(arg("lines:").c_str());
    for (int i = 0; i < n; ++i) std::printf("line %d\n", i);
  } else if (action.starts_with("wait-file:")) {
    const std::string path = helper_dir() + "/" + arg("wait-file:");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (access(path.c_str(), F_OK) != 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        std::fprintf(stderr, "rank_helper: %s did not appear\n", path.c_str());
        std::exit(94);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  } else if (action == "tty") {
    std::printf("stdout: %s\n", isatty(STDOUT_FILENO) ? "tty" : "pipe");
    std::printf("stderr: %s\n", isatty(STDERR_FILENO) ? "tty" : "pipe");
  } else if (action == "barrier") {
    std::fflush(stdout);
    barrier(rank, size);
  } else if (action == "shm") {
    const std::string path = "/dev/shm/cohort-" + env_str("COHORT_JOB_ID") + "-test-" + std::to_string(rank);
    const int fd = open(path.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0) {
      std::fprintf(stderr, "rank_helper: cannot create %s: %s\n", path.c_str(), std::strerror(errno));
      std::exit(96);
    }
    close(fd);
    std::printf("shm created %s\n", path.c_str());
  } else if (action.starts_with("ignore:")) {
    signal(signal_number(arg("ignore:")), SIG_IGN);
  } else if (action == "spawn-child") {
    const pid_t child = fork();
    if (child == 0) {
      execlp("sleep", "sleep", "60", static_cast<char*>(nullptr));
      _exit(127);
    }
    write_file(helper_dir() + "/child." + std::to_string(rank), std::to_string(child));
  } else if (action == "fds") {
    std::string list;
    if (DIR* d = opendir("/proc/self/fd")) {
      const int own = dirfd(d);
      while (const dirent* e = readdir(d)) {
        if (e->d_name[0] == '.') continue;
        const int fd = std::atoi(e->d_name);
        if (fd > 2 && fd != own) list += " " + std::to_string(fd);
      }
      closedir(d);
    }
    std::printf("fds:%s\n", list.empty() ? " none" : list.c_str());
  } else if (action == "stdin") {
    char c;
    const ssize_t n = read(STDIN_FILENO, &c, 1);
    std::printf("stdin: %s\n", n == 0 ? "eof" : "data");
  } else if (action == "store") {
    store_meeting();
  } else if (action == "secret-scan") {
    const std::string secret = env_str("COHORT_SECRET");
    int found = 0;
    if (DIR* d = opendir("/proc")) {
      while (const dirent* e = readdir(d)) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        // Plain reads: a process may exit while it is read (ESRCH).
        std::string cmdline;
        const int fd = open((std::string("/proc/") + e->d_name + "/cmdline").c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        char chunk[4096];
        for (ssize_t n; (n = read(fd, chunk, sizeof chunk)) > 0;) cmdline.append(chunk, static_cast<size_t>(n));
        close(fd);
        if (!secret.empty() && cmdline.find(secret) != std::string::npos) ++found;
      }
      closedir(d);
    }
    std::printf("secret on command lines: %d\n", found);
    std::printf("secret in environment: %s\n", secret.size() == 64 ? "yes" : "no");
  } else if (action == "netns") {
    char buffer[256] = {};
    std::printf("netns %s\n", readlink("/proc/self/ns/net", buffer, sizeof buffer - 1) > 0 ? buffer : "?");
  } else if (action == "cwd") {
    char buffer[4096] = {};
    std::printf("cwd %s\n", getcwd(buffer, sizeof buffer) ? buffer : "?");
  } else if (action.starts_with("sleep:")) {
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(arg("sleep:").c_str())));
  } else if (action.starts_with("exit:")) {
    std::fflush(stdout);
    std::exit(std::atoi(arg("exit:").c_str()));
  } else if (action.starts_with("kill:")) {
    std::fflush(stdout);
    kill(getpid(), std::atoi(arg("kill:").c_str()));
    std::this_thread::sleep_for(std::chrono::seconds(5));  // signals may be delivered late
  } else {
    std::fprintf(stderr, "rank_helper: unknown action '%s'\n", action.c_str());
    std::exit(95);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int rank = env_int("COHORT_RANK");
  const int size = env_int("COHORT_SIZE");
  for (int i = 1; i < argc; ++i) {
    std::string action = argv[i];
    if (action.starts_with("@")) {
      const size_t colon = action.find(':');
      if (colon == std::string::npos || std::atoi(action.substr(1, colon - 1).c_str()) != rank) continue;
      action = action.substr(colon + 1);
    }
    run(action, rank, size);
  }
  return 0;
}
