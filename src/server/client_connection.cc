// ClientConnection: the request's socket found by its addresses (see client_connection.h).
#include "server/client_connection.h"

#include <poll.h>
#include <sys/socket.h>

#include "server/process_sockets.h"

namespace lancet::server {

ClientConnection ClientConnection::find(const std::string& local_addr, int local_port, const std::string& remote_addr,
                                        int remote_port) {
  ClientConnection c;
  if (local_port <= 0 || remote_port <= 0) return c;
  c.fd_ = find_own_socket([&](int fd) {
    std::string host;
    int port = -1;
    if (!socket_address(fd, /*peer=*/false, &host, &port) || port != local_port ||
        (!local_addr.empty() && host != local_addr))
      return false;
    return socket_address(fd, /*peer=*/true, &host, &port) && port == remote_port && host == remote_addr;
  });
  return c;
}

bool ClientConnection::closed() const {
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLIN | POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) return true;
  // Readable: either the peer's next bytes or the end of its stream.
  char byte;
  return recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

}  // namespace lancet::server
