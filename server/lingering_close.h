// LingeringCloser: ends connections whose request body was left unread (an answer given before
// reading it: 413, 401 with a body, 431, 408, ...) without holding the server's I/O thread.
//
// Closing such a socket at once would reset the connection while the client may still be writing
// its body, and the client could lose the response; leaving it open would let the rest of the body
// be parsed as a next request. So, as nginx's lingering close: FIN after the response, then what
// the client still sends is read and dropped until it closes, pauses for 2 s, has sent 256 MiB, or
// 10 s passed. That wait runs on one background thread; the caller's descriptor is swapped at once
// for one that reads end of file, so the caller may simply close it.
// Thread safety: hand_over may be called from any thread. Linux only.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace strata::server {

class LingeringCloser {
 public:
  LingeringCloser();
  ~LingeringCloser();  // closes every connection still draining, joins the thread
  LingeringCloser(const LingeringCloser&) = delete;
  LingeringCloser& operator=(const LingeringCloser&) = delete;

  // Takes over the TCP connection of descriptor `fd` (the caller's, still open; the caller closes
  // it): sends FIN after what was written, drains in the background, and leaves `fd` reading end
  // of file. No-op for fd < 0.
  void hand_over(int fd);

  // Connections still draining (for tests).
  int draining() const;

 private:
  struct Draining {
    int fd;
    std::chrono::steady_clock::time_point start, last;
    uint64_t dropped;
  };
  void run();

  mutable std::mutex mu_;
  std::vector<Draining> draining_;
  int wake_[2] = {-1, -1};  // a pipe: hand_over and the destructor wake the thread
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace strata::server
