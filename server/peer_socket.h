// Detecting a client that went away while its request is generating: the peer's FIN (a close or a
// half-close) shows up at once as POLLRDHUP on the connection's socket, streaming or not, without
// writing to it (a write to a closed peer can succeed once before failing).
// Thread safety: pure function; Linux only.
#pragma once

namespace strata::server {

// True when the peer of socket `fd` has closed, half-closed or reset the connection (never
// blocks). False for fd < 0.
bool peer_closed(int fd);

}  // namespace strata::server
