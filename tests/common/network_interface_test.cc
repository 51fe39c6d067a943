// The network helpers every layer shares: checked against what the kernel
// says through other calls (uname, the loopback device's fixed address).
#include "cohort/common/network_interface.h"

#include <gtest/gtest.h>
#include <sys/utsname.h>

#include <algorithm>

namespace cohort::net::network_interface_test {
namespace {

TEST(NetworkInterface, HostNameIsTheKernelsNodeName) {
  utsname u{};
  ASSERT_EQ(::uname(&u), 0);
  EXPECT_EQ(host_name(), u.nodename);
}

TEST(NetworkInterface, LoopbackHasItsFixedAddress) {
  const std::vector<std::string> names = interfaces_with_ipv4();
  ASSERT_NE(std::find(names.begin(), names.end(), "lo"), names.end()) << "no loopback interface with IPv4 here";
  EXPECT_EQ(interface_ipv4("lo"), "127.0.0.1");
  EXPECT_EQ(local_address_toward("127.0.0.1"), "127.0.0.1");
}

TEST(NetworkInterface, PrimaryInterfaceIsNotLoopback) {
  const std::string primary = primary_interface();
  EXPECT_NE(primary, "lo");
  const std::vector<std::string> names = interfaces_with_ipv4();
  // The default route's interface, else one that is up with an address.
  if (!primary.empty() && primary != default_route_interface()) {
    EXPECT_NE(std::find(names.begin(), names.end(), primary), names.end()) << primary;
  }
}

TEST(NetworkInterface, UnknownNamesGiveEmptyAnswers) {
  EXPECT_EQ(interface_ipv4("no-such-if0"), "");
  EXPECT_EQ(local_address_toward("no-such-host.invalid"), "");
}

}  // namespace
}  // namespace cohort::net::network_interface_test
