// The payload a remote rank reads on stdin: round trips of any bytes, exact
// reads from a pipe, and rejection of malformed input.
#include "cohort/launcher/remote_payload.h"

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "cohort/common/error.h"

namespace cohort::launcher::remote_payload_test {
namespace {

RemotePayload sample() {
  return RemotePayload{.rank = 3,
                       .local_size = 2,
                       .host = "node-2",
                       .grace_s = 1.5,
                       .start_timeout_s = 7,
                       .cwd = "/home/u/my dir",
                       .output = OutputMode::pty,
                       .torch_master = TorchMasterRole::publish,
                       .argv = {"prog", "a b", "line\nbreak", "", "end", "quote'\"$x"},
                       .env = {{"COHORT_SECRET", "0123abcd"}, {"EMPTY", ""}, {"MULTI", "x=y=z\nw"}}};
}

TEST(RemotePayload, RoundTripsAnyBytes) {
  const RemotePayload p = sample();
  EXPECT_EQ(decode_payload(encode_payload(p)), p);
  RemotePayload binary = p;
  binary.argv.push_back(std::string("\0\xff\x01", 3));
  EXPECT_EQ(decode_payload(encode_payload(binary)), binary);
  RemotePayload piped = p;
  piped.output = OutputMode::pipe;
  EXPECT_EQ(decode_payload(encode_payload(piped)).output, OutputMode::pipe);
  for (const TorchMasterRole role : {TorchMasterRole::given, TorchMasterRole::read}) {
    RemotePayload other = p;
    other.torch_master = role;
    EXPECT_EQ(decode_payload(encode_payload(other)).torch_master, role);
  }
}

TEST(RemotePayload, ReadsExactlyOnePayloadFromAPipe) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const std::string bytes = encode_payload(sample()) + "trailing";
  ASSERT_EQ(write(fds[1], bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  EXPECT_EQ(read_payload(fds[0]), sample());
  // What follows the payload is left in the pipe.
  char rest[16] = {};
  EXPECT_EQ(read(fds[0], rest, sizeof rest), 8);
  EXPECT_STREQ(rest, "trailing");
  close(fds[0]);
  close(fds[1]);
}

TEST(RemotePayload, EarlyEndIsAnError) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const std::string bytes = encode_payload(sample());
  ASSERT_EQ(write(fds[1], bytes.data(), bytes.size() / 2), static_cast<ssize_t>(bytes.size() / 2));
  close(fds[1]);
  EXPECT_THROW(read_payload(fds[0]), Error);
  close(fds[0]);
}

TEST(RemotePayload, RejectsMalformedInput) {
  const std::string good = encode_payload(sample());
  EXPECT_THROW(decode_payload(""), Error);
  EXPECT_THROW(decode_payload("hello\n"), Error);
  EXPECT_THROW(decode_payload(good.substr(0, good.size() - 4)), Error);
  EXPECT_THROW(decode_payload(good + "x"), Error);
  EXPECT_THROW(decode_payload("cohortrun-remote 1\nrank 1\nx\nend\n"), Error);  // not terminated by '\n'
  EXPECT_THROW(decode_payload("cohortrun-remote 1\nrank 2\n-1\nend\n"), Error);
  EXPECT_THROW(decode_payload("cohortrun-remote 1\nbogus 1\nx\narg 1\np\nend\n"), Error);
  EXPECT_THROW(decode_payload("cohortrun-remote 1\nend\n"), Error);  // no program
  EXPECT_THROW(decode_payload("cohortrun-remote 1\noutput 3\ntty\narg 1\np\nend\n"), Error);
  EXPECT_THROW(decode_payload("cohortrun-remote 1\narg 99999999\n"), Error);
  EXPECT_THROW(decode_payload("cohortrun-remote 1\ntorch_master 4\nmine\narg 1\np\nend\n"), Error);
  EXPECT_THROW(decode_payload("cohortrun-remote 2\narg 1\np\nend\n"), Error);
}

}  // namespace
}  // namespace cohort::launcher::remote_payload_test
