#include "cohort/launcher/output_forwarder.h"

#include <fcntl.h>
#include <pty.h>
#include <termios.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace cohort::launcher::output_forwarder_test {
namespace {

// What the non-blocking `fd` holds now.
std::string read_now(int fd) {
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  return out;
}

// Captures what a forwarder writes, through a pipe.
class Capture {
 public:
  Capture() {
    EXPECT_EQ(::pipe2(fds_, O_NONBLOCK), 0);
    // Large enough for every test's output without a reader.
    ::fcntl(fds_[1], F_SETPIPE_SZ, 1 << 20);
  }
  ~Capture() {
    ::close(fds_[0]);
    ::close(fds_[1]);
  }
  int fd() const { return fds_[1]; }
  std::string take() { return read_now(fds_[0]); }

 private:
  int fds_[2];
};

TEST(OutputForwarder, PrefixesCompleteLines) {
  Capture c;
  OutputTail tail;
  OutputForwarder f({.rank = 3, .out_fd = c.fd()}, &tail);
  f.feed("hello\nworld\n");
  EXPECT_EQ(c.take(), "[3] hello\n[3] world\n");
}

TEST(OutputForwarder, JoinsLinesSplitAcrossReads) {
  Capture c;
  OutputTail tail;
  OutputForwarder f({.rank = 0, .out_fd = c.fd()}, &tail);
  f.feed("hel");
  EXPECT_EQ(c.take(), "");
  f.feed("lo\nwor");
  EXPECT_EQ(c.take(), "[0] hello\n");
  f.feed("ld");
  f.feed("\n\n");
  EXPECT_EQ(c.take(), "[0] world\n[0] \n");
}

TEST(OutputForwarder, FinishFlushesThePartialLastLine) {
  Capture c;
  OutputTail tail;
  OutputForwarder f({.rank = 12, .out_fd = c.fd()}, &tail);
  f.feed("a\nno newline");
  f.finish();
  EXPECT_EQ(c.take(), "[12] a\n[12] no newline\n");
  f.finish();  // nothing left
  EXPECT_EQ(c.take(), "");
}

TEST(OutputForwarder, SplitsOverlongLines) {
  Capture c;
  OutputTail tail;
  OutputForwarder f({.rank = 1, .out_fd = c.fd(), .max_line_bytes = 4}, &tail);
  f.feed("abcdefghij");
  EXPECT_EQ(c.take(), "[1] abcd\n[1] efgh\n");
  f.feed("\n");
  EXPECT_EQ(c.take(), "[1] ij\n");
}

TEST(OutputForwarder, StopsWritingWhenTheOutputIsGoneButKeepsTheTail) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ::close(fds[0]);
  // cohortrun ignores SIGPIPE; so must this test for the write to fail with EPIPE.
  struct sigaction ignore {}, previous {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, &previous);
  OutputTail tail;
  OutputForwarder f({.rank = 0, .out_fd = fds[1]}, &tail);
  f.feed("one\ntwo\n");
  EXPECT_FALSE(f.writable());
  ::sigaction(SIGPIPE, &previous, nullptr);
  ::close(fds[1]);
  EXPECT_EQ(tail.lines(), (std::deque<std::string>{"one", "two"}));
}

TEST(OutputForwarder, ARedrawnLineIsForwardedAsItsLastText) {
  // What a terminal would end up showing: the text after the last '\r'.
  Capture c;
  OutputTail tail;
  OutputForwarder f({.rank = 0, .out_fd = c.fd()}, &tail);
  f.feed("\r[#  ] 1");
  EXPECT_EQ(c.take(), "");
  f.feed("\r[## ] 2\r[###] 3\n");
  EXPECT_EQ(c.take(), "[0] [###] 3\n");
  f.feed("crlf\r\nsplit\r");
  f.feed("\nnext\n");
  EXPECT_EQ(c.take(), "[0] crlf\n[0] split\n[0] next\n");
  f.feed("left\r");
  f.finish();
  EXPECT_EQ(c.take(), "[0] left\n");
  EXPECT_EQ(tail.lines().back(), "left");
  EXPECT_EQ(tail.lines()[0], "[###] 3") << "the tail keeps lines, not frames";
}

// A pseudo-terminal standing for cohortrun's terminal: what is written to it
// is read back raw from its master.
class Terminal {
 public:
  Terminal() {
    termios raw{};
    ::cfmakeraw(&raw);
    EXPECT_EQ(::openpty(&master_, &slave_, nullptr, &raw, nullptr), 0);
    ::fcntl(master_, F_SETFL, O_NONBLOCK);
  }
  ~Terminal() {
    ::close(master_);
    ::close(slave_);
  }
  int fd() const { return slave_; }
  std::string take() { return read_now(master_); }

 private:
  int master_ = -1, slave_ = -1;
};

TEST(LiveLine, ARedrawnLineIsDrawnLiveWithOtherLinesAboveIt) {
  Terminal t;
  ASSERT_TRUE(::isatty(t.fd()));
  LiveLine live;
  OutputTail tail;
  OutputForwarder bar({.rank = 0, .out_fd = t.fd(), .live = &live}, &tail);
  OutputForwarder other({.rank = 1, .out_fd = t.fd(), .live = &live}, &tail);
  bar.feed("\r 50%");
  EXPECT_EQ(t.take(), "\r[0]  50%\x1b[K");
  // Another rank's line: the bar is erased, the line written, the bar redrawn.
  other.feed("hello\n");
  EXPECT_EQ(t.take(), "\r\x1b[K[1] hello\n[0]  50%");
  bar.feed("\r 75%");
  EXPECT_EQ(t.take(), "\r[0]  75%\x1b[K");
  // The bar's line ends: its last text stays as a line; nothing is redrawn.
  bar.feed("\r100%\n");
  EXPECT_EQ(t.take(), "\r\x1b[K[0] 100%\n");
  other.feed("after\n");
  EXPECT_EQ(t.take(), "[1] after\n");
  // A rank that ends mid-bar leaves its last text as a line.
  bar.feed("\rhalf");
  EXPECT_EQ(t.take(), "\r[0] half\x1b[K");
  bar.finish();
  EXPECT_EQ(t.take(), "\r\x1b[K[0] half\n");
  // Plain partial lines are not drawn: only redrawn ones are.
  other.feed("prompt: ");
  EXPECT_EQ(t.take(), "");
}

TEST(OutputTail, KeepsTheLastLinesOfBothStreams) {
  Capture out, err;
  OutputTail tail(3);
  OutputForwarder o({.rank = 0, .out_fd = out.fd()}, &tail);
  OutputForwarder e({.rank = 0, .out_fd = err.fd()}, &tail);
  o.feed("1\n2\n");
  e.feed("E\n");
  o.feed("3\n4\n");
  EXPECT_EQ(tail.lines(), (std::deque<std::string>{"E", "3", "4"}));
  EXPECT_EQ(err.take(), "[0] E\n");
}

TEST(OutputTail, CutsVeryLongLinesAndCanBeDisabled) {
  OutputTail tail(2);
  tail.add(std::string(5000, 'x'));
  ASSERT_EQ(tail.lines().size(), 1u);
  EXPECT_EQ(tail.lines()[0].size(), 1024u);
  OutputTail none(0);
  none.add("x");
  EXPECT_TRUE(none.lines().empty());
}

}  // namespace
}  // namespace cohort::launcher::output_forwarder_test
