// Detecting a client that went away while its request is generating.
//
// cpp-httplib 0.11 (Debian 12) gives handlers neither the connection's socket nor a liveness check,
// and a write to a closed peer can succeed once before failing. So the handler looks its socket up
// by the connection's addresses (/proc/self/fd + getsockname/getpeername) and polls it for
// POLLRDHUP/POLLHUP: the peer's FIN shows up at once, streaming or not, without writing.
// The descriptor is only valid while the handler runs (httplib closes it afterwards).
// Thread safety: pure functions; Linux only.
#pragma once

#include <string>

namespace strata::server {

// The descriptor of the accepted TCP socket whose local end is `local_addr`:`local_port` and whose
// peer is `remote_addr`:`remote_port` (all four: a server on 0.0.0.0 can hold two connections from
// one client address and port to two local addresses), or -1 when none is found.
int find_peer_socket(const std::string& local_addr, int local_port, const std::string& remote_addr, int remote_port);

// True when the peer of socket `fd` has closed or reset the connection (never blocks). False for
// fd < 0.
bool peer_closed(int fd);

}  // namespace strata::server
