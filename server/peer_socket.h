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

// The descriptor of the accepted TCP socket whose local port is `local_port` and whose peer is
// `remote_addr`:`remote_port`, or -1 when none is found.
int find_peer_socket(int local_port, const std::string& remote_addr, int remote_port);

// True when the peer of socket `fd` has closed or reset the connection (never blocks). False for
// fd < 0.
bool peer_closed(int fd);

// Ends a connection whose request body was left unread (a 413 answered before reading it): FIN
// after the response already written, then what the client still sends is read and dropped for up
// to `linger_ms` (or until it closes), then reads see end of file, so httplib's keep-alive loop
// closes the socket instead of parsing the rest of the body as a next request (nginx's lingering
// close: closing with unread data would reset the connection, and the client could lose the
// response). No-op for fd < 0.
void lingering_close(int fd, int linger_ms);

}  // namespace strata::server
