// Whether the client of a request that is being handled has closed its connection.
// cpp-httplib 0.11 (the Debian build the server links) gives handlers neither the socket nor a
// closed-connection check, and it writes a non-streaming response only after the handler
// returns, so a handler waiting for the engine would never notice a client that left. The
// server's own connection loop knows the socket (of_socket); without it, the request carries
// both ends' addresses, and the accepted socket is open (and ours) until the handler is done:
// find() picks it out of the process's descriptors by those addresses. closed() asks the
// kernel whether the peer has hung up, without blocking.
#pragma once

#include <string>

namespace lancet::server {

class ClientConnection {
 public:
  // The connected TCP socket whose local and peer address:port are these; an unusable
  // ClientConnection (found() false, closed() always false) when there is none.
  static ClientConnection find(const std::string& local_addr, int local_port, const std::string& remote_addr,
                               int remote_port);
  // The connected socket `fd` (the server's connection loop knows which socket a request
  // came on: HttpListener::current_socket()); -1 gives an unusable one.
  static ClientConnection of_socket(int fd) {
    ClientConnection c;
    c.fd_ = fd;
    return c;
  }
  bool found() const { return fd_ >= 0; }
  // True once the peer has closed or reset the connection. Bytes it sent after the request
  // (a pipelined next request) do not count as closed.
  bool closed() const;

 private:
  int fd_ = -1;
};

}  // namespace lancet::server
