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

// Ends a connection whose request body was left unread (a 413 answered before reading it): FIN
// after the response already written, then what the client still sends is read and dropped until
// it closes, pauses for 1 s, has sent 64 MiB, or 3 s passed; then the descriptor is swapped for
// one that reads end of file, so httplib's keep-alive loop closes it instead of parsing the rest
// of the body as a next request (nginx's lingering close: closing at once with unread data would
// reset the connection, and a client still writing its body could lose the response). No-op for
// fd < 0.
void lingering_close(int fd);

}  // namespace strata::server
