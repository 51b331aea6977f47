// Finding this process's own sockets: cpp-httplib 0.11 (the Debian build the server links)
// keeps its listening and accepted sockets to itself, so the server finds the ones it needs
// (server/client_connection.h, the listen backlog in http_server.cc) among the process's
// open descriptors.
#pragma once

#include <functional>
#include <string>

namespace lancet::server {

// The first open socket descriptor for which `match` is true, or -1.
int find_own_socket(const std::function<bool(int fd)>& match);
// A socket's numeric address and port (getsockname, or getpeername with `peer`), as httplib
// reports them; false when it has none (not an inet socket, not connected).
bool socket_address(int fd, bool peer, std::string* host, int* port);

}  // namespace lancet::server
