#include "server/peer_socket.h"

#include <poll.h>

namespace strata::server {

bool peer_closed(int fd) {
  if (fd < 0) return false;
  pollfd p{};
  p.fd = fd;
  p.events = POLLRDHUP;
  if (poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

}  // namespace strata::server
