// ClientConnection on a real loopback connection: found by its addresses, open while the peer
// is connected (also after the peer sent more bytes), closed once the peer closes; an address
// pair that is no connection finds nothing.
#include "server/client_connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace lancet::server {
namespace {

int port_of(int fd, bool peer) {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  if ((peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len)
            : getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len)) != 0)
    return -1;
  return ntohs(a.sin_port);
}

TEST(ClientConnection, FoundByAddressesAndClosedWhenThePeerCloses) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(listener, 4), 0);
  const int server_port = port_of(listener, false);
  addr.sin_port = htons(static_cast<uint16_t>(server_port));
  const int client = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const int accepted = accept(listener, nullptr, nullptr);
  ASSERT_GE(accepted, 0);
  const int client_port = port_of(client, false);

  const ClientConnection c = ClientConnection::find("127.0.0.1", server_port, "127.0.0.1", client_port);
  ASSERT_TRUE(c.found());
  EXPECT_FALSE(c.closed());
  ASSERT_EQ(write(client, "GET", 3), 3);  // a pipelined next request is not a close
  EXPECT_FALSE(c.closed());
  EXPECT_FALSE(ClientConnection::find("127.0.0.1", server_port, "127.0.0.1", client_port + 1).found());
  EXPECT_FALSE(ClientConnection::find("127.0.0.1", server_port, "127.0.0.2", client_port).found());
  close(client);
  EXPECT_TRUE(c.closed());
  close(accepted);
  close(listener);
}

}  // namespace
}  // namespace lancet::server
